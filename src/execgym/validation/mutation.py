"""Mutation check: how many small bugs in the reference do the tests catch?

Mutants come from :mod:`execgym.validation.mutants`; each is judged like a rollout, in
the sandbox, with a wall-time limit of ``mutant_time_factor`` times the reference's
slowest run (so a mutant that loops forever costs seconds, not the task's limit). A
mutant is *killed* when its verdict is anything but ``passed`` (a failed assert, an
exception, a timeout); ``sandbox_error`` runs are retried once and then left out.

Equivalent mutants (same behaviour as the reference, so no test can kill them) are
handled cheaply, in two steps:

1. before running, mutants whose normalized AST equals the original's or another
   mutant's are dropped (:func:`~execgym.validation.mutants.make_mutants`);
2. after judging, the survivors and the reference are called, in one sandbox run, on
   every input the tests pass literally to ``candidate(...)`` and every example call in
   the prompt. A survivor whose results equal the reference's on all of them is marked
   ``same_on_known_inputs``: equivalent, or different only on inputs nobody tests. One
   whose results differ is ``differs_on_known_inputs``: the tests call it on an input
   where it is wrong and do not notice, the clearest sign of weak assertions. Calls
   that run out of their second on either side are left out of the comparison (a
   slower mutant is not a different one); with none left, the class is ``unknown``.

The score is ``killed / judged`` over all judged mutants, so a possibly-equivalent
survivor still lowers it (no test suite can be blamed for a truly equivalent mutant,
but telling those apart needs a proof or more inputs, not a cheap check). The
``adjusted_score`` leaves the ``same_on_known_inputs`` survivors out, as an upper bound.
"""

from __future__ import annotations

import asyncio
from typing import Any

from execgym.judges.base import Judgement, Verdict
from execgym.tasks.models import Task
from execgym.validation._probe import probe
from execgym.validation._source import candidate_calls, reference_program
from execgym.validation.base import CheckResult, Context, Outcome, entry_point, tests_of
from execgym.validation.description import example_calls
from execgym.validation.mutants import Mutant, make_mutants

NAME = "mutation"


def mutant_task(task: Task) -> Task:
    """The task a mutant runs as: the mutant is the whole program, so no prompt."""
    return task.model_copy(update={"prompt": ""})


async def check(task: Task, ctx: Context, reference_runs: list[Judgement]) -> CheckResult:
    """Judge the mutants of ``task``'s reference and score the tests by the kills."""
    program = reference_program(task)
    mutants, dropped = make_mutants(
        program.source, program.in_reference, ctx.thresholds.max_mutants
    )
    if not mutants:
        return CheckResult(NAME, Outcome.SKIP, "no mutation point in the reference")
    limits = task.limits_over(ctx.limits)
    slowest = max((j.run.wall_time_s for j in reference_runs if j.run), default=0.1)
    wall_s = min(
        limits.wall_time_s,
        max(ctx.thresholds.min_mutant_wall_time_s, slowest * ctx.thresholds.mutant_time_factor),
    )
    mutant_limits = limits.merged(wall_time_s=wall_s, cpu_time_s=min(limits.cpu_time_s, wall_s))
    as_task = mutant_task(task)
    judgements = await asyncio.gather(
        *(ctx.judge_completion(as_task, m.source, mutant_limits) for m in mutants)
    )
    judged = [(m, j) for m, j in zip(mutants, judgements, strict=True) if not j.verdict.is_masked]
    survivors = [m for m, j in judged if j.verdict is Verdict.PASSED]
    classes = await _classify(task, ctx, program.source, survivors)
    killed = len(judged) - len(survivors)
    score = killed / len(judged) if judged else 0.0
    same = sum(1 for c in classes.values() if c == "same_on_known_inputs")
    adjusted = killed / (len(judged) - same) if len(judged) > same else 1.0
    details: dict[str, Any] = {
        "score": round(score, 4),
        "adjusted_score": round(adjusted, 4),
        "mutants": len(mutants),
        "judged": len(judged),
        "killed": killed,
        "dropped_as_equivalent_or_invalid": dropped,
        "survivors": [_describe(m, classes.get(m.mutant_id, "unknown")) for m in survivors],
        "kills_by_verdict": _count(
            j.verdict.value for _, j in judged if j.verdict is not Verdict.PASSED
        ),
    }
    if score < ctx.thresholds.min_mutation_score:
        return CheckResult(
            NAME,
            Outcome.FAIL,
            f"weak tests: mutation score {score:.2f} < {ctx.thresholds.min_mutation_score:g} "
            f"({len(survivors)} of {len(judged)} mutants survive)",
            details,
        )
    return CheckResult(NAME, Outcome.PASS, details=details)


async def _classify(
    task: Task, ctx: Context, original: str, survivors: list[Mutant]
) -> dict[str, str]:
    calls = [*candidate_calls(tests_of(task)), *example_calls(task)]
    if not survivors or not calls:
        return {}
    outcome = await probe(
        ctx, [original, *(m.source for m in survivors)], entry_point(task), calls, ctx.limits
    )
    if outcome is None or outcome[0] is None:
        return {}
    return {
        m.mutant_id: _compare(outcome[0], result)
        for m, result in zip(survivors, outcome[1:], strict=True)
    }


_TIMED_OUT = "!raise CallTimeout"


def _compare(original: list[str], mutant: list[str] | None) -> str:
    """Classify a survivor; calls that ran out of time on either side do not count."""
    if mutant is None:
        return "unknown"
    pairs = [(a, b) for a, b in zip(original, mutant, strict=True) if _TIMED_OUT not in (a, b)]
    if not pairs:
        return "unknown"
    same = all(a == b for a, b in pairs)
    return "same_on_known_inputs" if same else "differs_on_known_inputs"


def _describe(mutant: Mutant, kind: str) -> dict[str, Any]:
    return {
        "id": mutant.mutant_id,
        "operator": mutant.operator,
        "line": mutant.line,
        "change": mutant.description,
        "class": kind,
        "source": mutant.source,
    }


def _count(values: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts
