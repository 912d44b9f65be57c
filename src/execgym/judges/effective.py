"""The effective limits a rollout ran under, as each result echoes them (``limits``).

One place states what the judges apply: the run's limits (the command line's or
:class:`~execgym.limits.Limits` given to the scorer, overridden by the task's
``limits``, then by the kind's per-case rule: :meth:`execgym.tasks.models.Task.run_limits`),
the compile step's (compiled languages), and the stack of compiled programs (the task's
:class:`~execgym.tasks.models.Conventions`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from execgym.judges.compile import compile_limits_for
from execgym.judges.languages import SPECS, stack_limit_bytes
from execgym.limits import Limits
from execgym.tasks.models import Task

STACK_LANGUAGES = frozenset({"c", "cpp", "rust", "go", "javascript"})
"""Languages whose stack limit the conventions set (native binaries, and Node.js)."""

_BUILT_BY_KIND = frozenset({"stdio", "assert"})
"""Kinds whose programs are built by the compile step (and get the conventions)."""


def effective_limits(task: Task, limits: Limits) -> dict[str, Any]:
    """The limits a rollout of ``task`` runs under when the scorer's limits are ``limits``.

    Returns:
        The fields of :class:`~execgym.limits.Limits` of each run of the rollout's
        program (seconds, bytes, counts), plus, where they apply: ``case_time_limit_s``
        (the task's per-case wall time: each stdio run's, or each function call's),
        ``stack_bytes`` (native programs and Node.js; ``None`` is the default)
        and ``compile`` (the compile step's limits, same fields).

    Raises:
        ConfigError: if the task's limits are invalid (as when it is judged).
    """
    task_limits = task.limits_over(limits)
    echoed: dict[str, Any] = dataclasses.asdict(task.run_limits(task_limits))
    if task.case_time_limit_s is not None:
        echoed["case_time_limit_s"] = task.case_time_limit_s
    compiled = task.kind in _BUILT_BY_KIND and (task.kind == "stdio" or task.language != "python")
    if compiled and task.language in STACK_LANGUAGES:
        run = task.run_limits(task_limits)
        echoed["stack_bytes"] = stack_limit_bytes(task.conventions.stack_bytes, run)
    if compiled and SPECS[task.language].compile is not None:
        compile_limits = task.compile_limits_over(compile_limits_for(task_limits))
        echoed["compile"] = dataclasses.asdict(compile_limits)
    return echoed
