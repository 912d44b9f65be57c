"""Task quality: find broken and weak tasks before they poison training.

Checks, one module each: :mod:`.schema`, :mod:`.reference`, :mod:`.determinism`,
:mod:`.trivial`, :mod:`.mutation` (mutants from :mod:`.mutants`), :mod:`.coverage`,
:mod:`.duplicates`, :mod:`.description`; :mod:`.report` writes JSON and HTML.
Everything that runs task code runs in the sandbox given in the :class:`Context`.

>>> site = coverage_site()                                   # doctest: +SKIP
>>> box = WarmPoolSandbox(read_only_paths=sandbox_paths(site))  # doctest: +SKIP
>>> ctx = Context(box, coverage_site=site)                   # doctest: +SKIP
>>> report = await validate_tasks(list(tasks.values()), ctx)  # doctest: +SKIP
"""

from __future__ import annotations

from execgym.validation.base import (
    DEFAULT_THRESHOLDS,
    CheckResult,
    Context,
    Outcome,
    Thresholds,
)
from execgym.validation.coverage import coverage_site, sandbox_paths
from execgym.validation.engine import (
    CHECKS,
    TaskReport,
    ValidationReport,
    validate_task,
    validate_tasks,
)

__all__ = [
    "CHECKS",
    "DEFAULT_THRESHOLDS",
    "CheckResult",
    "Context",
    "Outcome",
    "TaskReport",
    "Thresholds",
    "ValidationReport",
    "coverage_site",
    "sandbox_paths",
    "validate_task",
    "validate_tasks",
]
