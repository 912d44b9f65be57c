"""Diagnostics of a Python rollout: one run of the guest harness in the rollout's sandbox.

The harness (:mod:`execgym.guest.diagnose`) runs the program ``prompt + completion``
(as :func:`~execgym.judges.assert_tests.build_program` joins them) in a process of its
own and calls the entry point with the task's own inputs: ``check(candidate)`` of an
``assert`` task, each case's arguments of a ``function_call`` task. This module builds
its job, runs it under the rollout's limits, and turns its report into
:class:`~execgym.judges.diagnosis.Section` objects.
"""

from __future__ import annotations

import functools
import json
import secrets
from dataclasses import dataclass
from typing import Any

from execgym import guest
from execgym.diagnostics.leaks import (
    DEFAULT_THRESHOLDS,
    Thresholds,
    enclosing,
    find_leaks,
    where,
)
from execgym.judges.assert_tests import build_program
from execgym.judges.base import Judgement, harness_report
from execgym.judges.diagnosis import Section
from execgym.judges.masking import INFRASTRUCTURE_MARK
from execgym.limits import Limits
from execgym.sandbox.base import RunRequest, Sandbox, Status
from execgym.tasks.models import FunctionCase, Task

BUDGET_SHARE = 0.8
"""Share of the run's wall-time limit the harness gives itself before it reports what it
has (so a slow solution yields a partial report, not a killed run)."""

PROFILE_S = 0.05
"""Seconds of passes under each profiler (cProfile, then the line sampler)."""

HALF_CALLS = 32
"""Calls of the entry point per half of the leak phase, at least (two passes at least)."""


@functools.cache
def harness_source() -> bytes:
    """The guest harness (:mod:`execgym.guest.diagnose` and its parts), bundled once."""
    return guest.bundle("diagnose").encode("utf-8")


def _part(data: bytes) -> bytes:
    return b"%010d" % len(data) + data


@dataclass(frozen=True, slots=True)
class PythonRun:
    """What one harness run measured.

    Attributes:
        sections: ``{check: Section}`` for each check asked for.
        answers: The complexity phase's answer hashes per size (``None`` where none).
        points: ``[(n, seconds per call), ...]`` of the complexity phase.
    """

    sections: dict[str, Section]
    answers: list[str | None]
    points: list[tuple[int, float]]


def entry_of(task: Task) -> str | None:
    """The function the diagnostics call: ``entry_point`` or ``fn_name``."""
    return task.entry_point if task.kind == "assert" else task.fn_name or task.entry_point


def job_for(task: Task, program: str, checks: tuple[str, ...], limits: Limits) -> dict[str, Any]:
    """The harness's job (part one of its stdin) for ``program`` under ``limits``."""
    options = task.diagnose
    cases = None
    if task.kind == "function_call":
        cases = [[c.args, c.kwargs] for c in task.test_cases if isinstance(c, FunctionCase)]
    return {
        "program": program,
        "entry": entry_of(task),
        "tests": task.tests if task.kind == "assert" else None,
        "cases": cases,
        "checks": list(checks),
        "half_calls": HALF_CALLS,
        "budget_s": BUDGET_SHARE * limits.wall_time_s,
        "profile_s": PROFILE_S,
        "sizes": list(options.sizes) if options else [],
        "inputs": options.inputs if options else None,
    }


async def run_python(
    task: Task,
    completion: str,
    sandbox: Sandbox,
    limits: Limits,
    checks: tuple[str, ...],
    *,
    program: str | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> PythonRun:
    """Run the harness once on ``prompt + completion`` (or ``program``) for ``checks``.

    Returns:
        The sections; never raises for anything the program does (a crash, a hang, a
        broken protocol is a ``failed`` section with ``fault="rollout"``).

    Raises:
        SandboxSetupFailed: if the sandbox could not be set up at all.
    """
    program = build_program(task, completion) if program is None else program
    nonce = secrets.token_hex(16)
    job = json.dumps(job_for(task, program, checks, limits)).encode("utf-8", "surrogatepass")
    request = RunRequest(
        python_source=harness_source(),
        stdin=_part(job) + _part(nonce.encode()),
        limits=limits,
        want_report=True,
    )
    run = await sandbox.run(request)
    payload = harness_report(run, nonce, "diagnostics harness")
    if isinstance(payload, Judgement):
        host = run.status is Status.SANDBOX_ERROR or INFRASTRUCTURE_MARK in payload.details
        failed = Section(
            "failed",
            f"the diagnostics run ended without a report: {payload.message}"[:500],
            "host" if host else "rollout",
        )
        return PythonRun(dict.fromkeys(checks, failed), [], [])
    return _sections(program, payload, checks, thresholds)


def _sections(
    program: str, payload: dict[str, Any], checks: tuple[str, ...], thresholds: Thresholds
) -> PythonRun:
    phases = payload.get("phases") or {}
    error = phases.get("error")
    problem = payload.get("problem") or (
        f"the program raised {error.get('type')}: {error.get('message')}" if error else ""
    )
    sections: dict[str, Section] = {}
    answers: list[str | None] = []
    points: list[tuple[int, float]] = []

    def broken(what: str) -> Section:
        reason = problem or f"the solution's process sent no {what} data"
        return Section("failed", str(reason)[:500], "rollout")

    if "leaks" in checks:
        try:
            leaks, calls = find_leaks(program, phases, thresholds)
            found = [leak.to_json() for leak in leaks]
            reason = (
                f"{len(leaks)} leak(s) over {calls} calls" if leaks else f"none over {calls} calls"
            )
            sections["leaks"] = Section(
                "measured", reason, tool="tracemalloc + /proc (outside the process)",
                data={"found": found, "calls": calls},
            )  # fmt: skip
        except (KeyError, TypeError, ValueError):
            sections["leaks"] = broken("leak")
    if "hotspots" in checks:
        sections["hotspots"] = _hotspots(program, phases.get("hotspots")) or broken("profile")
    if "complexity" in checks:
        rows = phases.get("complexity")
        if payload.get("inputs_error"):
            sections["complexity"] = Section(
                "not_applicable", f"the task's input generator failed: {payload['inputs_error']}"
            )
        elif not isinstance(rows, list) or not rows:
            sections["complexity"] = broken("timing")
        else:
            bad = next((r for r in rows if r.get("error")), None)
            if bad is not None:
                reason = f"the entry point raised at n={bad['n']}: {bad['error']}"
                sections["complexity"] = Section("failed", reason[:500], "rollout")
            else:
                points = [(int(r["n"]), float(r["seconds"])) for r in rows]
                answers = [r.get("answer") for r in rows]
                sections["complexity"] = Section(
                    "measured",
                    tool="CPU time of the solution process, read by the harness (schedstat)",
                )
    return PythonRun(sections, answers, points)


ANONYMOUS = ("<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>", "<lambda>")
"""Code objects that are part of the function they are written in: their time is its."""


def _functions(program: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The profile's rows per function, comprehensions and lambdas merged into theirs."""
    merged: dict[tuple[str, int], dict[str, Any]] = {}
    for row in rows:
        name, line = str(row["function"]), int(row["line"])
        outer = enclosing(program, line) if name in ANONYMOUS else None
        key = outer or (name, line)
        entry = merged.setdefault(key, {"self_share": 0.0, "cum_share": 0.0, "calls": 0})
        entry["self_share"] += float(row["self_share"])
        if outer is None:
            entry["cum_share"] = max(entry["cum_share"], float(row["cum_share"]))
            entry["calls"] += int(row["calls"])
    functions = [
        {
            "where": where(program, line).to_json() | {"function": name},
            "self_share": round(entry["self_share"], 4),
            "cum_share": round(entry["cum_share"], 4),
            "calls": entry["calls"],
        }
        for (name, line), entry in merged.items()
    ]
    return sorted(functions, key=lambda f: -f["self_share"])


def _hotspots(program: str, phase: dict[str, Any] | None) -> Section | None:
    if not isinstance(phase, dict):
        return None
    try:
        functions = _functions(program, phase["functions"])
        sampled = phase["lines"]
        lines = [
            {
                "where": where(program, int(r["line"])).to_json(),
                "share": round(float(r["share"]), 4),
                "samples": int(r["samples"]),
            }
            for r in sampled["top"]
        ]
    except (KeyError, TypeError, ValueError):
        return None
    top = functions[0]["where"]["function"] if functions else "none of the model's functions"
    reason = f"top: {top}; {int(sampled['samples'])} CPU samples"
    return Section(
        "measured", reason, tool="cProfile (functions) + SIGPROF sampling at 1 ms (lines)",
        data={"functions": functions, "lines": lines, "passes": int(phase.get("passes", 0))},
    )  # fmt: skip
