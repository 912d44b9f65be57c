"""Tasks and rollouts: the models, the JSONL loaders and the built-in data sets."""

from __future__ import annotations

from typing import TYPE_CHECKING

from execgym.lazy_exports import lazy_package

if TYPE_CHECKING:
    from execgym.tasks.loaders import (
        DATASETS,
        LineProblem,
        RolloutLine,
        canonical_rollouts,
        load_dataset,
        load_rollouts,
        load_tasks,
    )
    from execgym.tasks.models import Rollout, Task, TaskLimits

__all__ = [
    "DATASETS",
    "LineProblem",
    "Rollout",
    "RolloutLine",
    "Task",
    "TaskLimits",
    "canonical_rollouts",
    "load_dataset",
    "load_rollouts",
    "load_tasks",
]

lazy_package(
    __name__,
    {
        "DATASETS": "execgym.tasks.loaders",
        "LineProblem": "execgym.tasks.loaders",
        "Rollout": "execgym.tasks.models",
        "RolloutLine": "execgym.tasks.loaders",
        "Task": "execgym.tasks.models",
        "TaskLimits": "execgym.tasks.models",
        "canonical_rollouts": "execgym.tasks.loaders",
        "load_dataset": "execgym.tasks.loaders",
        "load_rollouts": "execgym.tasks.loaders",
        "load_tasks": "execgym.tasks.loaders",
    },
)
