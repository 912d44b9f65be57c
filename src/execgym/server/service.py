"""What the routes share: the sandbox, the job runner, the capacity, readiness, limits."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from execgym.errors import Error, TaskError
from execgym.limits import DEFAULT_LIMITS, MIN_MEMORY_BYTES, Limits
from execgym.scoring.selftest import self_test
from execgym.server.capacity import BoundedSandbox, Capacity
from execgym.server.jobs import Batch, JobRunner
from execgym.server.languages import Toolchains
from execgym.server.metrics import Metrics
from execgym.server.programs import ProgramOutcome, ProgramRequest, run_program
from execgym.server.schemas import ScoreRequest
from execgym.server.settings import ServerSettings
from execgym.server.status import StatusBoard
from execgym.tasks.loaders import (
    LineProblem,
    RolloutLine,
    canonical_rollouts,
    describe_validation_error,
    duplicate_problems,
    load_dataset,
)
from execgym.tasks.models import Rollout, Task

READINESS_TIMEOUT_S = 20.0
"""How long ``/readyz`` waits for the sandbox self-test (it queues behind other runs)."""


@dataclass
class Service:
    """The state behind every route of one app.

    Attributes:
        settings: The service's settings.
        sandbox: The shared, bounded sandbox.
        toolchains: Host tools for ``/run_code`` and ``/v1/run``.
        capacity: In-flight items.
        jobs: Scoring jobs.
        metrics: Prometheus metrics.
        status: Throughput, verdict mix, breakers and heartbeats (``/v1/status``).
    """

    settings: ServerSettings
    sandbox: BoundedSandbox
    toolchains: Toolchains
    capacity: Capacity
    jobs: JobRunner
    metrics: Metrics
    status: StatusBoard | None = None
    clock: Callable[[], float] = time.monotonic
    _ready_at: float | None = None
    _datasets: dict[str, dict[str, Task]] = field(default_factory=dict)
    _ready_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def run(self, request: ProgramRequest) -> ProgramOutcome:
        """Run one program in a capacity slot.

        Raises:
            CapacityExceeded: if no slot is free.
            TaskError: for an unknown or unavailable language, or a bad file name.
        """
        async with self.capacity.slot():
            outcome = await run_program(self.sandbox, request, self.toolchains)
        status = outcome.run.status.value if outcome.run else outcome.sandbox.status.value
        self.metrics.programs.labels(request.language, status).inc()
        if self.status is not None:
            self.status.record_program(request.language, status)
        return outcome

    async def ready(self) -> str | None:
        """``None`` when the sandbox passes its self-test, else why not.

        A pass is cached for ``readiness_ttl_s``.
        """
        async with self._ready_lock:
            now = self.clock()
            if self._ready_at is not None and now - self._ready_at < self.settings.readiness_ttl_s:
                return None
            try:
                async with asyncio.timeout(READINESS_TIMEOUT_S):
                    await self_test(self.sandbox)
            except Error as error:
                self._ready_at = None
                return str(error)
            except TimeoutError:
                self._ready_at = None
                return (
                    f"the sandbox self-test did not finish within {READINESS_TIMEOUT_S} s "
                    f"({self.capacity.in_flight} items in flight)"
                )
            self._ready_at = now
            return None

    def limits(
        self,
        *,
        wall_time_s: float | None = None,
        memory_bytes: int | None = None,
        **others: Any,
    ) -> Limits:
        """Limits for one request: the server's defaults with the request's values.

        Raises:
            TaskError: if a value passes the server's maximum.
        """
        settings = self.settings
        if wall_time_s is not None and wall_time_s > settings.max_wall_time_s:
            raise TaskError(
                f"a timeout of {wall_time_s} s is more than this server allows "
                f"({settings.max_wall_time_s} s)"
            )
        if memory_bytes is not None and memory_bytes < MIN_MEMORY_BYTES:
            raise TaskError(
                f"a memory limit of {memory_bytes} bytes is too little to start a program "
                f"(at least {MIN_MEMORY_BYTES} bytes)"
            )
        if memory_bytes is not None and memory_bytes > settings.max_memory_bytes:
            raise TaskError(
                f"a memory limit of {memory_bytes} bytes is more than this server allows "
                f"({settings.max_memory_bytes} bytes)"
            )
        wall = wall_time_s or DEFAULT_LIMITS.wall_time_s
        base = Limits(
            wall_time_s=wall,
            cpu_time_s=others.pop("cpu_time_s", None) or wall,
            memory_bytes=memory_bytes or settings.default_memory_bytes,
        )
        return base.merged(**others)

    def batch(self, request: ScoreRequest) -> Batch:
        """The batch a score request describes.

        Bad tasks and rollouts become ``invalid`` results instead of failing the request.

        Raises:
            TaskError: if the request gives no tasks or no rollouts, or too many.
        """
        tasks, skipped = self._tasks(request)
        items = self._items(request, tasks)
        most = min(self.settings.max_batch, self.settings.max_in_flight)
        if len(items) > most:
            raise TaskError(
                f"{len(items)} rollouts in one batch; this server takes at most {most} "
                "(max_batch, and no more than max_in_flight): split the batch"
            )
        overrides = request.limits.model_dump(exclude_none=True) if request.limits else {}
        return Batch(tasks, items, self.limits(**overrides), skipped)

    def _tasks(self, request: ScoreRequest) -> tuple[dict[str, Task], dict[str, str]]:
        if (request.tasks is None) == (request.dataset is None):
            raise TaskError("give either tasks (a list of task objects) or dataset, not both")
        if request.dataset is not None:
            if request.dataset not in self._datasets:
                self._datasets[request.dataset] = load_dataset(request.dataset)
            tasks = self._datasets[request.dataset]
            if request.task_ids is not None:
                unknown = sorted(set(request.task_ids) - set(tasks))
                if unknown:
                    raise TaskError(f"unknown task_ids in {request.dataset}: {unknown[:10]}")
                tasks = {task_id: tasks[task_id] for task_id in request.task_ids}
            return tasks, {}
        tasks, skipped = {}, {}
        definitions: dict[str, list[tuple[int, int, Task | None]]] = {}
        for number, record in enumerate(request.tasks or []):
            task_id = record.get("task_id") if isinstance(record, dict) else None
            try:
                task = Task.model_validate(record)
            except ValidationError as error:
                why = f"tasks[{number}]: {describe_validation_error(error, 'item', record)}"
                if isinstance(task_id, str):
                    skipped[task_id] = why
                    definitions.setdefault(task_id, []).append((number, number, None))
                continue
            definitions.setdefault(task.task_id, []).append((number, number, task))
            tasks.setdefault(task.task_id, task)
        for task_id, lines in definitions.items():  # one id, several tasks: as load_tasks
            if len(lines) > 1:
                problems, keep = duplicate_problems("tasks", task_id, lines)
                if not keep:
                    tasks.pop(task_id, None)
                    skipped[task_id] = problems[0].message.replace("lines", "tasks[] items")
        return tasks, skipped

    def _items(
        self, request: ScoreRequest, tasks: dict[str, Task]
    ) -> list[RolloutLine | LineProblem]:
        if (request.rollouts is None) == (request.solutions is None):
            raise TaskError('give either rollouts or solutions: "canonical", not both')
        if request.solutions == "canonical":
            return list(canonical_rollouts(tasks))
        items: list[RolloutLine | LineProblem] = []
        for index, record in enumerate(request.rollouts or []):
            try:
                items.append(RolloutLine(index, Rollout.model_validate(record)))
            except ValidationError as error:
                items.append(
                    LineProblem(
                        "rollouts", index, index, describe_validation_error(error, "item", record)
                    )
                )
        return items
