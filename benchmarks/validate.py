"""Validate all 164 HumanEval tasks (mutation testing included) and compare with HumanEval+.

Prints the time to validate the set, the mutants judged per second, the mutation-score
distribution and the weakest tasks, and writes the HTML and JSON reports. Then it
measures the EvalPlus finding (Liu et al. 2023: HumanEval's tests are insufficient)
directly: every mutant that survives HumanEval's tests is judged again on HumanEval+'s
tests (``/work/shared/data/humanevalplus``, v0.1.10, base + plus inputs with expected
outputs baked in), and a task whose survivors HumanEval+ kills is one whose HumanEval
tests are *measurably* too weak. Our flagged set is compared with that set.

    .venv/bin/python benchmarks/validate.py [--workers N] [--out DIR] [--tasks N]
        [--no-plus]

HumanEval+'s tests import numpy; numpy is made visible to the sandbox the same way as
coverage.py (a copy in its own read-only site directory, see
:mod:`execgym.validation._site`).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import time
from pathlib import Path

from execgym import load_dataset
from execgym.judges.base import Verdict
from execgym.limits import Limits
from execgym.sandbox import WarmPoolSandbox
from execgym.validation import Context, Thresholds, coverage_site, sandbox_paths, validate_tasks
from execgym.validation import report as reports
from execgym.validation.mutation import mutant_task

PLUS = Path("/work/shared/data/humanevalplus/HumanEvalPlus-OriginFmt.jsonl.gz")


def _plus_tests(site: str) -> dict[str, str]:
    with gzip.open(PLUS, "rt", encoding="utf-8") as source:
        rows = [json.loads(line) for line in source]
    prelude = f"import sys\nsys.path.insert(0, {site!r})\n"
    return {row["task_id"]: prelude + row["test"] for row in rows}


async def _plus_kills(ctx: Context, tasks, report, plus: dict[str, str]) -> dict[str, dict]:
    """Per task: does HumanEval's reference pass HE+, and how many survivors HE+ kills."""
    limits = Limits(wall_time_s=30.0, cpu_time_s=30.0)

    async def one(task_report) -> tuple[str, dict]:
        task = tasks[task_report.task_id]
        found = task_report.result("mutation")
        survivors = found.details.get("survivors", []) if found else []
        plus_task = task.model_copy(update={"tests": plus[task.task_id]})
        reference = await ctx.judge_completion(plus_task, task.reference or "", limits)
        out = {"reference_passes_plus": reference.verdict is Verdict.PASSED, "survivors": 0}
        if reference.verdict is not Verdict.PASSED:
            out["reference_verdict"] = reference.verdict.value
            return task.task_id, out
        as_mutant = mutant_task(plus_task)
        verdicts = await asyncio.gather(
            *(ctx.judge_completion(as_mutant, s["source"], limits) for s in survivors)
        )
        killed = [
            s
            for s, j in zip(survivors, verdicts, strict=True)
            if j.verdict is not Verdict.PASSED and not j.verdict.is_masked
        ]
        out.update(
            survivors=len(survivors),
            killed_by_plus=len(killed),
            killed_same_on_known=sum(s["class"] == "same_on_known_inputs" for s in killed),
            same_on_known=sum(s["class"] == "same_on_known_inputs" for s in survivors),
        )
        return task.task_id, out

    return dict(await asyncio.gather(*(one(t) for t in report.tasks)))


def _compare(report, plus_result: dict[str, dict], threshold: float) -> dict:
    flagged = {t.task_id for t in report.tasks if (t.mutation_score or 1.0) < threshold}
    measured = {k for k, v in plus_result.items() if v.get("killed_by_plus", 0) > 0}
    rows = [v for v in plus_result.values() if v["reference_passes_plus"]]
    same = sum(v["same_on_known"] for v in rows)
    return {
        "flagged_weak": len(flagged),
        "plus_kills_a_survivor": len(measured),
        "both": len(flagged & measured),
        "precision": round(len(flagged & measured) / len(flagged), 3) if flagged else None,
        "recall": round(len(flagged & measured) / len(measured), 3) if measured else None,
        "survivors": sum(v["survivors"] for v in rows),
        "survivors_killed_by_plus": sum(v["killed_by_plus"] for v in rows),
        "same_on_known_inputs": same,
        "same_on_known_inputs_killed_by_plus": sum(v["killed_same_on_known"] for v in rows),
        "reference_fails_plus": sorted(
            k for k, v in plus_result.items() if not v["reference_passes_plus"]
        ),
        "flagged_and_plus": sorted(flagged & measured),
        "flagged_not_plus": sorted(flagged - measured),
        "plus_not_flagged": sorted(measured - flagged),
    }


def _threshold_table(report, plus_result: dict[str, dict]) -> list[str]:
    """Precision and recall of "score < t" against "HE+ kills a survivor", per t."""
    measurable = {k for k, v in plus_result.items() if v["reference_passes_plus"]}
    confirmed = {k for k in measurable if plus_result[k].get("killed_by_plus", 0) > 0}
    scores = {t.task_id: t.mutation_score for t in report.tasks}
    lines = [f"{len(measurable)} tasks measurable, HE+ kills a survivor in {len(confirmed)}"]
    for threshold in (0.75, 0.8, 0.85, 0.9, 0.95, 1.0):
        flagged = {k for k in measurable if (scores.get(k) or 1.0) < threshold}
        both = len(flagged & confirmed)
        precision = both / len(flagged) if flagged else float("nan")
        recall = both / len(confirmed) if confirmed else float("nan")
        lines.append(
            f"score < {threshold:.2f}: {len(flagged):3d} flagged, {both:3d} confirmed by HE+, "
            f"precision {precision:.2f}, recall {recall:.2f}"
        )
    return lines


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", default="validate-humaneval")
    parser.add_argument("--tasks", type=int, default=None, help="only the first N tasks")
    parser.add_argument("--max-mutants", type=int, default=40)
    parser.add_argument("--no-plus", action="store_true", help="skip the HumanEval+ stage")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tasks = load_dataset("humaneval")
    chosen = list(tasks.values())[: args.tasks]
    site = coverage_site(extra=("numpy",))
    thresholds = Thresholds(max_mutants=args.max_mutants)
    async with WarmPoolSandbox(read_only_paths=sandbox_paths(site)) as box:
        ctx = Context(box, workers=args.workers, coverage_site=site, thresholds=thresholds)
        await ctx.judge_completion(chosen[0], chosen[0].reference or "", ctx.limits)  # warm up
        ctx.runs = 0
        started = time.perf_counter()
        report = await validate_tasks(chosen, ctx)
        elapsed = time.perf_counter() - started
        summary = reports.summary(report)
        mutants = summary["mutation"]["mutants_judged"]
        print(f"validated {len(chosen)} tasks in {elapsed:.1f} s with {args.workers} workers")
        print(
            f"{report.runs} sandbox runs ({report.runs / elapsed:.1f}/s), {mutants} mutants "
            f"judged ({mutants / elapsed:.1f} mutants/s over the whole validation)"
        )
        reports.write_html(report, out / "report.html")
        reports.write_json(report, out / "report.json")
        print(json.dumps(summary, indent=1))
        scores = sorted(t.mutation_score for t in report.tasks if t.mutation_score is not None)
        bins = [
            sum(1 for s in scores if i / 10 <= s < (i + 1) / 10 or (i == 9 and s == 1.0))
            for i in range(10)
        ]
        print("mutation score histogram (0.0-0.1 ... 0.9-1.0):", bins)
        print("weakest tasks:")
        for task in reports.weakest(report, 20):
            found = task.result("mutation")
            print(
                f"  {task.task_id:14s} {task.mutation_score:.2f} "
                f"({found.details['killed']}/{found.details['judged']} killed)"
            )
        print("dropped:")
        for task in report.tasks:
            if not task.kept:
                print(f"  {task.task_id}: {'; '.join(task.reasons)}")
        if args.no_plus:
            return
        plus_started = time.perf_counter()
        plus_result = await _plus_kills(ctx, tasks, report, _plus_tests(site))
        comparison = _compare(report, plus_result, thresholds.min_mutation_score)
        print(f"HumanEval+ re-judging of survivors: {time.perf_counter() - plus_started:.1f} s")
        print(json.dumps(comparison, indent=1))
        print("\n".join(_threshold_table(report, plus_result)))
        (out / "humanevalplus.json").write_text(
            json.dumps({"comparison": comparison, "per_task": plus_result}, indent=1)
        )


if __name__ == "__main__":
    asyncio.run(main())
