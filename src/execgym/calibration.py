"""Time limits that fit the task: calibrated from its reference solution's own time.

A fixed limit (say 3 s) is what every rollout that loops forever costs, however fast
the task's correct solutions are; on real batches those few rollouts take a large
share of the sandbox time (issue 23: 0.3 % of the rollouts, 43 % of the time). With
calibration each task's limit is measured instead:

    limit = min(user's limit, max(factor x reference time, floor))

- *reference time*: the wall time (and CPU time) of the task's reference solution,
  judged once by the same judge in the same sandbox under the user's limits; for tasks
  whose judge times each test case (``stdio``: one run per case; ``function_call``:
  per call), the slowest case, and the limit is set per case
  (``case_time_limit_s``).
- *factor* (:data:`DEFAULT_FACTOR`, 10) leaves room for correct solutions slower than
  the reference (another algorithm, a cold cache, a loaded host); *floor*
  (:data:`DEFAULT_FLOOR_S`, 1 s) keeps the start-up of a run and the noise of a busy
  machine from ever deciding a verdict. Both are settable (``--calibration-factor``,
  ``--calibration-floor``); why these values: :data:`DEFAULT_FLOOR_S`.
- Measured only where it can matter (``floor_first``, the default): a calibrated limit
  is never below the floor, so a rollout first runs under the floor; the reference is
  measured only when a run hits that limit, and that run is judged again under the
  calibrated limits when they are higher (:meth:`Calibrator.first_try`) and its verdict
  could change (:func:`judge_again`). Same verdicts as measuring first, without a
  reference run for the tasks whose rollouts all end within the floor (most of them).
- Never above the user's limit (command line or task), and the user's limit as it is
  where there is no usable reference (none, or it does not pass): a calibrated limit
  can only end a runaway rollout sooner.
- Measured once per task and kept: in memory for the batch, and on disk
  (``~/.cache/execgym/calibration``, keyed by the SHA-256 of the task, the sandbox,
  the limits and this host and interpreter), so the next batch does not measure
  again. A rollout of the task that starts while its reference is being measured
  waits for that measurement, so every rollout of a task runs under the same limits.

Each result carries its ``calibration`` (reference times, factor, floor, the
calibrated limits, or why none) and the effective ``limits`` it ran under.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import os
import platform
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from execgym.limits import Limits

if TYPE_CHECKING:
    from execgym.judges.base import Judgement
    from execgym.tasks.models import Task

log = logging.getLogger(__name__)

DEFAULT_FACTOR = 10.0
"""Calibrated limit = this many times the reference's time (at least the floor)."""

DEFAULT_FLOOR_S = 1.0
"""A calibrated limit is never below this many seconds (wall and CPU alike).

Measured on the 2-core development host (``benchmarks/real_batch.py``, the mutant
workload of ``benchmarks/mutant_workload.py``, 2 at once, load 14; docs/sandboxes.md):
CPU time is the stable clock (a passing rollout used at most 1.58x its reference's CPU
time, but 2.30x its wall time) and 159 of 164 HumanEval references give a CPU limit at
this floor; a lower floor would move verdicts, not only end loops sooner: the memory
bomb needed 0.41-0.44 s of CPU to fill 512 MiB (``memory_exceeded``) and would become a
``timeout``."""

CACHE_VERSION = 1
"""Part of every cache key: raised when what is measured changes."""

_PER_CASE_KINDS = frozenset({"stdio", "function_call"})


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/execgym/calibration`` (``~/.cache/execgym/calibration``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "execgym" / "calibration"


@dataclasses.dataclass(frozen=True, slots=True)
class Measurement:
    """The reference's times, as measured once (or why there are none).

    Attributes:
        wall_time_s: The reference run's wall time (``None``: not measured).
        cpu_time_s: Its CPU time.
        case_wall_time_s: The slowest test case's wall time, for judges that time
            each case (``None`` otherwise).
        why_not: Why there is no measurement (no reference, it did not pass).
    """

    wall_time_s: float | None = None
    cpu_time_s: float | None = None
    case_wall_time_s: float | None = None
    why_not: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Calibration:
    """How a task's limits were calibrated: one ``calibration`` object of a result.

    Attributes:
        measurement: The reference's times.
        factor: The factor applied.
        floor_s: The floor applied.
        wall_time_s: The calibrated wall time of each run (seconds).
        cpu_time_s: The calibrated CPU time of each run.
        case_time_limit_s: The calibrated per-case limit, for judges with cases.
        cached: Whether the measurement came from the disk cache.
        floor_try: The run under the floor that hit a time limit before the reference
            was measured (see :meth:`Calibrator.first_try`), when there was one:
            ``{"verdict", "wall_time_s", "cpu_time_s", "limit_hit"}``.
        judged_again: With ``floor_try``: whether the rollout was judged again under
            the calibrated limits (the result is that run; the floor try's sandbox
            time comes on top), or the floor try's verdict stands (:func:`judge_again`).
    """

    measurement: Measurement
    factor: float
    floor_s: float
    wall_time_s: float
    cpu_time_s: float
    case_time_limit_s: float | None = None
    cached: bool = False
    floor_try: dict[str, Any] | None = None
    judged_again: bool | None = None

    @property
    def calibrated(self) -> bool:
        """Whether a reference was measured (else the user's limits apply as they are)."""
        return self.measurement.why_not is None

    def to_json(self) -> dict[str, Any]:
        """The ``calibration`` field of a result."""
        m = self.measurement
        return {
            "calibrated": self.calibrated,
            "reason": m.why_not,
            "reference_wall_time_s": _round(m.wall_time_s),
            "reference_cpu_time_s": _round(m.cpu_time_s),
            "reference_case_wall_time_s": _round(m.case_wall_time_s),
            "factor": self.factor,
            "floor_s": self.floor_s,
            "wall_time_s": _round(self.wall_time_s),
            "cpu_time_s": _round(self.cpu_time_s),
            "case_time_limit_s": _round(self.case_time_limit_s),
            "cached": self.cached,
            "floor_try": self.floor_try,
            "judged_again": self.judged_again,
        }

    def after_floor_try(self, judgement: Judgement, judged_again: bool) -> Calibration:
        """This calibration, saying that the floor try ``judgement`` came first."""
        run = judgement.run
        floor_try = {
            "verdict": judgement.verdict.value,
            "wall_time_s": _round(run.wall_time_s) if run is not None else None,
            "cpu_time_s": _round(run.cpu_time_s) if run is not None else None,
            "limit_hit": run.limit_hit if run is not None else None,
        }
        return dataclasses.replace(self, floor_try=floor_try, judged_again=judged_again)


def measurement_of(judgement: Judgement) -> Measurement:
    """The reference's times from its ``judgement``, or why there are none.

    The run's wall and CPU time; for judges that time each test case (``details.cases``
    with ``wall_time_s``), the slowest case too. A reference that did not pass gives no
    times; nor does a ``sandbox_error`` (ours: measure again later).
    """
    from execgym.judges.base import Verdict

    if judgement.verdict is Verdict.SANDBOX_ERROR:
        return Measurement(why_not=f"the reference run failed: {judgement.message}")
    if judgement.verdict is not Verdict.PASSED or judgement.run is None:
        why = f"the reference solution does not pass ({judgement.verdict.value})"
        return Measurement(why_not=why)
    cases = judgement.details.get("cases") if judgement.details else None
    times = [
        case["wall_time_s"]
        for case in (cases if isinstance(cases, list) else [])
        if isinstance(case, dict) and isinstance(case.get("wall_time_s"), int | float)
    ]
    run = judgement.run
    return Measurement(
        wall_time_s=max([run.wall_time_s, *times]),
        cpu_time_s=run.cpu_time_s,
        case_wall_time_s=max(times) if times else None,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Measured:
    """A calibrator whose measurement was made elsewhere, once for every worker.

    ``execgym score --broker ... --calibrate-limits`` judges each task's reference once,
    through the broker, before the batch; each job then carries its task's measurement,
    and the worker calibrates with this instead of measuring again.

    Attributes:
        measurement: The reference's times, or why there are none.
        factor: See :data:`DEFAULT_FACTOR`.
        floor_s: See :data:`DEFAULT_FLOOR_S`.
    """

    measurement: Measurement
    factor: float = DEFAULT_FACTOR
    floor_s: float = DEFAULT_FLOOR_S

    async def calibrate(
        self, task: Task, limits: Limits, judge: JudgeReference
    ) -> tuple[Task, Limits, Calibration]:
        """As :meth:`Calibrator.calibrate`, with the given measurement (nothing is run)."""
        calibrator = Calibrator(factor=self.factor, floor_s=self.floor_s)
        return calibrator.apply(task, limits, self.measurement)


def hit_time_limit(judgement: Judgement) -> bool:
    """Whether a run was stopped by a clock (wall or CPU): its verdict may depend on it."""
    from execgym.judges.base import Verdict

    hit = judgement.run.limit_hit if judgement.run is not None else None
    return judgement.verdict is Verdict.TIMEOUT or hit in ("wall_time_s", "cpu_time_s")


def judge_again(floor_try: Judgement, floor: Limits, calibrated: Limits) -> bool:
    """Whether a rollout whose floor try hit a time limit must run under ``calibrated``.

    Not when its verdict cannot change: the calibrated limits are the floor's (the
    task's limit is the floor), or the floor try was stopped by the CPU clock and the
    calibrated CPU limit is the same (a calibrated limit is never below the floor, so
    only the wall limit grew; a run that used the whole CPU limit before the wall one
    uses it again). Only a program running on more than one core at once gets there
    (a single thread's CPU time never outruns its wall time), and judging it again
    would cost a second run that ends the same way.

    Args:
        floor_try: The judgement of the run under the floor.
        floor: Its per-run limits (:meth:`Task.run_limits
            <execgym.tasks.models.Task.run_limits>`).
        calibrated: The calibrated per-run limits.
    """
    if calibrated == floor:
        return False
    hit = floor_try.run.limit_hit if floor_try.run is not None else None
    return not (hit == "cpu_time_s" and calibrated.cpu_time_s == floor.cpu_time_s)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


JudgeReference = Callable[["Task", str, Limits], Awaitable["Judgement"]]
"""Judges a completion of a task under limits (the scorer's own judge)."""


class Calibrator:
    """Calibrates each task's time limits from its reference, once per task.

    Args:
        factor: See :data:`DEFAULT_FACTOR`; at least 1.
        floor_s: See :data:`DEFAULT_FLOOR_S`; positive.
        cache_dir: Where measurements are kept between batches (``None``: memory only).
        sandbox_name: Part of the cache key (a measurement holds for one sandbox).
        floor_first: Run a rollout of a task not yet measured under the floor first,
            and measure the reference only if that run hits a time limit (see
            :meth:`first_try`); ``False`` measures every task's reference before its
            first rollout runs.

    Raises:
        ValueError: if ``factor`` is below 1 or ``floor_s`` is not positive.
    """

    def __init__(
        self,
        *,
        factor: float = DEFAULT_FACTOR,
        floor_s: float = DEFAULT_FLOOR_S,
        cache_dir: Path | None = None,
        sandbox_name: str = "",
        floor_first: bool = True,
    ) -> None:
        if not factor >= 1:
            raise ValueError(f"calibration factor {factor!r}: give at least 1")
        if not floor_s > 0:
            raise ValueError(f"calibration floor {floor_s!r}: give a positive number of seconds")
        self.factor = factor
        self.floor_s = floor_s
        self.cache_dir = cache_dir
        self.floor_first = floor_first
        self._sandbox_name = sandbox_name
        self._measured: dict[str, asyncio.Future[tuple[Measurement, bool]]] = {}
        self._keys: dict[tuple[str, Limits], str] = {}
        self.measurements = 0
        """Reference runs made (not served from a cache)."""

    async def calibrate(
        self, task: Task, limits: Limits, judge: JudgeReference
    ) -> tuple[Task, Limits, Calibration]:
        """``task`` and ``limits`` with the calibrated time limits, and how.

        Args:
            task: The task (a copy with ``case_time_limit_s`` is returned for judges
                with cases).
            limits: The user's limits for the task (after its own overrides).
            judge: How to judge the reference, the first time (the scorer's judge for
                the task's kind, in the scorer's sandbox).

        Returns:
            ``(task, limits, calibration)``: unchanged but for the time limits, which
            are never above those given.
        """
        key = self._key(task, limits)
        future = self._measured.get(key)
        # A rollout of the task that starts while another measures its reference waits
        # for that one measurement: every rollout of a task in a batch then runs under
        # the same limits, so identical completions get identical verdicts whatever the
        # scheduling (a rollout that did not wait ran under the user's limit while its
        # twin, later, ran under the calibrated one).
        if future is None:
            future = asyncio.get_running_loop().create_future()
            self._measured[key] = future
            try:
                future.set_result(await self._measure(task, limits, key, judge))
            except BaseException as error:
                del self._measured[key]  # a later rollout measures again
                future.set_exception(error)
                future.exception()  # retrieved: the waiters re-raise it
                raise
        measurement, cached = await asyncio.shield(future)
        return self.apply(task, limits, measurement, cached)

    def first_try(self, task: Task, limits: Limits) -> tuple[Task, Limits, Calibration] | None:
        """Limits to run a rollout under before ``task``'s reference is measured, or ``None``.

        A calibrated limit is never below the floor, so a run that ends within the floor
        has the verdict it would have under any calibrated limit: the reference needs
        measuring only for a task with a rollout that runs past the floor, and most
        tasks of a real batch have none (issue 23: measuring each task's reference
        first was one more run per task, a fifth of the runs at 5 rollouts per task).
        A run that hits a time limit under these (:func:`hit_time_limit`) is judged
        again under the calibrated limits when they are higher.

        Returns:
            ``(task, limits, calibration)`` for the first try: the time limits capped
            at the floor, and a calibration saying the reference was not measured; or
            ``None`` when the limits are known (measured, cached on disk) or must be
            known first (judges that time each test case; ``floor_first`` off).
        """
        if not self.floor_first or task.kind in _PER_CASE_KINDS:
            return None
        key = self._key(task, limits)
        if key in self._measured:
            return None  # measured, or being measured: calibrate() gives the limits
        cached = self._read_cache(key)
        if cached is not None:
            future = asyncio.get_running_loop().create_future()
            future.set_result((cached, True))
            self._measured[key] = future
            return None
        wall = min(limits.wall_time_s, self.floor_s)
        tried = limits.merged(wall_time_s=wall, cpu_time_s=min(limits.cpu_time_s, wall))
        run = task.run_limits(tried)
        why = (
            f"not measured: the run ended within the floor ({self.floor_s:g} s), where "
            "every calibrated limit gives the same verdict"
        )
        calibration = Calibration(
            Measurement(why_not=why), self.factor, self.floor_s, run.wall_time_s,
            run.cpu_time_s, task.case_time_limit_s,
        )  # fmt: skip
        return task, tried, calibration

    def measuring(self, task: Task, limits: Limits) -> asyncio.Future[Any] | None:
        """The measurement of ``task``'s reference under ``limits`` while it is being made.

        A batch scorer asks before giving a rollout a sandbox: a rollout of a task whose
        reference another sandbox is measuring would only wait for it (see
        :meth:`calibrate`), so it is set aside until the returned future is done and
        the sandbox takes another rollout meanwhile.

        Returns:
            The future (done when the measurement is made or has failed), or ``None``:
            not started (the caller's rollout will measure it) or already made.
        """
        future = self._measured.get(self._key(task, limits))
        return future if future is not None and not future.done() else None

    def apply(
        self, task: Task, limits: Limits, m: Measurement, cached: bool = False
    ) -> tuple[Task, Limits, Calibration]:
        """``task`` and ``limits`` calibrated from the measurement ``m`` (see :meth:`calibrate`).

        ``cached``: whether ``m`` came from a cache (said in the result).
        """
        if m.why_not is not None or m.wall_time_s is None:
            run = task.run_limits(limits)
            return task, limits, Calibration(
                m, self.factor, self.floor_s, run.wall_time_s, run.cpu_time_s,
                task.case_time_limit_s, cached,
            )  # fmt: skip
        wall = min(limits.wall_time_s, self._limit(m.wall_time_s))
        cpu = min(limits.cpu_time_s, self._limit(m.cpu_time_s or m.wall_time_s))
        case_limit = task.case_time_limit_s
        if task.kind in _PER_CASE_KINDS and m.case_wall_time_s is not None:
            allowed = task.case_time_limit_s or limits.wall_time_s
            case_limit = min(allowed, self._limit(m.case_wall_time_s))
            task = task.model_copy(update={"case_time_limit_s": case_limit})
            if task.kind == "stdio":  # each case is a run: its limits are the case's
                wall = max(wall, min(limits.wall_time_s, case_limit))
        calibrated = limits.merged(wall_time_s=wall, cpu_time_s=min(cpu, wall))
        run = task.run_limits(calibrated)
        return (
            task,
            calibrated,
            Calibration(
                m, self.factor, self.floor_s, run.wall_time_s, run.cpu_time_s, case_limit, cached
            ),
        )

    def _limit(self, seconds: float) -> float:
        return max(self.factor * seconds, self.floor_s)

    async def _measure(
        self, task: Task, limits: Limits, key: str, judge: JudgeReference
    ) -> tuple[Measurement, bool]:
        cached = self._read_cache(key)
        if cached is not None:
            return cached, True
        if not task.reference:
            return Measurement(why_not="the task has no reference solution"), False
        from execgym.errors import Error
        from execgym.judges.base import Verdict

        try:
            judgement = await judge(task, task.reference, limits)
        except Error as error:  # not kept: the next batch measures again
            return Measurement(why_not=f"the reference could not be judged: {error}"), False
        except Exception as error:  # our bug: the user's limits, never a lost batch
            log.exception("calibration_crashed task_id=%s", task.task_id)
            return Measurement(why_not=f"the reference could not be judged: {error!r}"), False
        self.measurements += 1
        measurement = measurement_of(judgement)
        if judgement.verdict is Verdict.SANDBOX_ERROR:  # ours: not kept, tried again
            return measurement, False
        self._write_cache(key, measurement)
        return measurement, False

    def _key(self, task: Task, limits: Limits) -> str:
        memo = (task.task_id, limits)  # a task id names one task within a batch
        key = self._keys.get(memo)
        if key is None:
            key = self._keys[memo] = self._content_key(task, limits)
        return key

    def _content_key(self, task: Task, limits: Limits) -> str:
        text = json.dumps(
            [
                CACHE_VERSION,
                task.model_dump(mode="json"),
                dataclasses.asdict(limits),
                self._sandbox_name,
                platform.node(),
                sys.version,
            ],
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(text.encode()).hexdigest()

    def _read_cache(self, key: str) -> Measurement | None:
        if self.cache_dir is None:
            return None
        try:
            data = json.loads((self.cache_dir / f"{key}.json").read_text())
            return Measurement(**data)
        except (OSError, ValueError, TypeError):
            return None  # none, or unreadable: measured again

    def _write_cache(self, key: str, measurement: Measurement) -> None:
        if self.cache_dir is None:
            return
        try:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            partial = self.cache_dir / f".{key}.{os.getpid()}.tmp"
            partial.write_text(json.dumps(dataclasses.asdict(measurement)))
            os.replace(partial, self.cache_dir / f"{key}.json")
        except OSError:
            pass  # a cache that cannot be written costs a measurement next time
