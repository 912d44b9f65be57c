"""Coverage check: which lines and branches of the reference do the tests run?

coverage.py runs INSIDE the sandbox, on the program the judge would run (prompt,
reference, tests and ``check(entry_point)``). The sandbox sees only ``/usr`` and the
interpreter's prefix, and starts Python with ``-I -S``, so coverage.py is made visible
explicitly: :func:`coverage_site` copies the installed ``coverage`` package, once, into
a site directory of its own (see :mod:`execgym.validation._site`), and the validating
sandbox binds *only that directory* read-only at the same path (:func:`sandbox_paths`);
the in-sandbox runner puts it on ``sys.path``. Nothing else of the host's
site-packages is visible.

Only the reference's own lines count (the prompt's helper functions are not the
reference's to cover).
"""

from __future__ import annotations

import json
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from execgym import guest
from execgym.errors import ConfigError
from execgym.sandbox.base import Status
from execgym.sandbox.bwrap import WORK_DIR, interpreter_paths
from execgym.tasks.models import Task
from execgym.validation._site import stage_packages
from execgym.validation._source import reference_program
from execgym.validation.base import CheckResult, Context, Outcome

NAME = "coverage"

TRACING_SLOWDOWN = 3.0
"""The run under coverage.py gets this many times the task's time limits (tracing every
line and branch slows a program down, several times for tight loops)."""


def coverage_site(extra: tuple[str, ...] = (), root: Path | None = None) -> str | None:
    """A site directory holding ``coverage`` (and ``extra`` packages), for the sandbox.

    Args:
        extra: More installed packages to make importable (e.g. ``("numpy",)``).
        root: Where site directories are kept (default: the user's cache directory).

    Returns:
        Its host path, or ``None`` if coverage.py is not installed.

    Raises:
        ConfigError: if a package of ``extra`` is not installed.
    """
    if find_spec("coverage") is None:
        return None
    return stage_packages(("coverage", *extra), root)


def sandbox_paths(site: str | None) -> list[str]:
    """Read-only host paths for a validating sandbox: the interpreter, plus ``site``.

    Raises:
        ConfigError: if ``site`` lies under ``/tmp`` or ``/work``, where the sandbox
            mounts its own private tmpfs (the bind would be hidden).
    """
    paths = interpreter_paths()
    if site is not None:
        if any(site == top or site.startswith(top + "/") for top in ("/tmp", WORK_DIR)):
            raise ConfigError(
                f"site directory {site} is under /tmp or {WORK_DIR}, which the sandbox "
                "replaces with its own tmpfs; keep it elsewhere (the default is ~/.cache)"
            )
        paths.append(site)
    return paths


def _runner() -> bytes:
    return guest.source("coverage_validation").encode()


def _fraction(covered: int, total: int) -> float:
    return covered / total if total else 1.0


def measure(data: dict[str, Any], first: int, last: int) -> dict[str, Any]:
    """Line and branch coverage restricted to lines ``first..last`` of the program."""

    def inside(line: int) -> bool:
        return first <= line <= last

    executed = [n for n in data.get("executed_lines", []) if inside(n)]
    missing = [n for n in data.get("missing_lines", []) if inside(n)]
    taken = [b for b in data.get("executed_branches", []) if inside(b[0])]
    untaken = [b for b in data.get("missing_branches", []) if inside(b[0])]
    return {
        "line": round(_fraction(len(executed), len(executed) + len(missing)), 4),
        "branch": round(_fraction(len(taken), len(taken) + len(untaken)), 4),
        "missing_lines": missing,
        "missing_branches": untaken,
    }


async def check(task: Task, ctx: Context) -> CheckResult:
    """Measure the tests' coverage of the reference; fail under ``min_line_coverage``."""
    if ctx.coverage_site is None:
        return CheckResult(
            NAME, Outcome.SKIP, "coverage.py is not installed (pip install coverage)"
        )
    program = reference_program(task)
    source = f"{program.source}\n\n{task.tests}\n\ncheck({task.entry_point})\n"
    job = json.dumps({"site": ctx.coverage_site, "source": source}).encode("utf-8")
    limits = task.limits_over(ctx.limits)
    slow = TRACING_SLOWDOWN
    limits = limits.merged(
        wall_time_s=limits.wall_time_s * slow, cpu_time_s=limits.cpu_time_s * slow
    )
    run = await ctx.run_python(_runner(), job, limits)
    lines = run.stdout.decode("utf-8", "replace").strip().splitlines()
    if run.status is not Status.OK or run.exit_code != 0 or not lines:
        why = run.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [run.status.value]
        return CheckResult(NAME, Outcome.WARN, f"coverage could not be measured: {why[0]}")
    data = json.loads(lines[-1])
    details = measure(data, program.first_line, program.last_line)
    t = ctx.thresholds
    if details["line"] < t.min_line_coverage:
        return CheckResult(
            NAME,
            Outcome.FAIL,
            f"the tests run {details['line']:.0%} of the reference's lines "
            f"(missing {details['missing_lines']})",
            details,
        )
    if details["branch"] < t.min_branch_coverage:
        return CheckResult(
            NAME,
            Outcome.WARN,
            f"the tests take {details['branch']:.0%} of the reference's branches",
            details,
        )
    return CheckResult(NAME, Outcome.PASS, details=details)
