"""Tasks and rollouts as they arrive in JSONL files (validated with pydantic)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from execgym.errors import ConfigError
from execgym.limits import Limits

LANGUAGES = ("python",)
"""Languages the judges run today."""


class TaskLimits(BaseModel):
    """Optional per-task limits; any field left out keeps the run's limit.

    Field names and units are those of :class:`execgym.limits.Limits`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    wall_time_s: float | None = Field(default=None, gt=0)
    cpu_time_s: float | None = Field(default=None, gt=0)
    memory_bytes: int | None = Field(default=None, gt=0)
    max_processes: int | None = Field(default=None, gt=0)
    max_output_bytes: int | None = Field(default=None, gt=0)
    max_file_bytes: int | None = Field(default=None, gt=0)
    disk_bytes: int | None = Field(default=None, gt=0)
    max_open_files: int | None = Field(default=None, gt=0)


class Task(BaseModel):
    """One task: a prompt, its tests and how to call the solution.

    Attributes:
        task_id: Unique id, e.g. ``"HumanEval/0"``.
        prompt: The code the model continues (signature and docstring).
        tests: Test code defining ``check(candidate)``, which asserts.
        entry_point: Name of the function passed to ``check``.
        language: Programming language; only ``"python"`` for now.
        reference: A known-correct completion of ``prompt``, if any.
        limits: Per-task limits overriding the run's (optional).
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    task_id: str = Field(min_length=1)
    prompt: str
    tests: str = Field(min_length=1)
    entry_point: str = Field(min_length=1)
    language: str = "python"
    reference: str | None = None
    limits: TaskLimits | None = None

    @field_validator("language")
    @classmethod
    def _known_language(cls, value: str) -> str:
        if value.lower() not in LANGUAGES:
            raise ValueError(f"language {value!r} is not supported yet; use one of {LANGUAGES}")
        return value.lower()

    @field_validator("entry_point")
    @classmethod
    def _identifier(cls, value: str) -> str:
        if not value.isidentifier():
            raise ValueError(f"entry_point {value!r} is not a Python identifier")
        return value

    def limits_over(self, base: Limits) -> Limits:
        """The limits for this task's runs: ``base`` with this task's overrides.

        Raises:
            ConfigError: if an override is invalid.
        """
        if self.limits is None:
            return base
        overrides: dict[str, Any] = self.limits.model_dump(exclude_none=True)
        try:
            return base.merged(**overrides)
        except ConfigError as error:
            raise ConfigError(f"task {self.task_id}: {error}") from error


class Rollout(BaseModel):
    """One completion to score.

    Attributes:
        task_id: The task it answers.
        completion: The code the model wrote after the task's prompt.
        rollout_id: Caller's id; generated (``"<task_id>#<index>"``) when absent.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    task_id: str = Field(min_length=1)
    completion: str
    rollout_id: str | None = None
