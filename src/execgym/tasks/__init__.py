"""Tasks and rollouts: the models, the JSONL loaders and the built-in data sets."""

from __future__ import annotations

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
