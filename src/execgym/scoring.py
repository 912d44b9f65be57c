"""Score a batch of rollouts: judge each in its own sandbox, concurrently, and reward it.

One bad rollout never sinks the batch: a malformed line or an unknown task becomes an
``invalid`` result, a failure of ours a ``sandbox_error`` (retried once), and every
result is handed to ``on_result`` as soon as it exists, so nothing already scored is
lost if the run is interrupted. Which failures are masked, and which count toward a
circuit breaker, is decided by :mod:`execgym.judges.masking`, where the rule is written.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from execgym.calibration import Calibration, Calibrator
from execgym.errors import ConfigError, Error, SandboxSetupFailed, TaskError
from execgym.judges.assert_native import NativeAssertJudge
from execgym.judges.assert_tests import AssertJudge
from execgym.judges.base import ErrorDetail, Judgement, Verdict
from execgym.judges.compile import Builder
from execgym.judges.effective import effective_limits
from execgym.judges.function_call import FunctionCallJudge
from execgym.judges.pytest_tests import PytestJudge
from execgym.judges.stdio import StdioJudge
from execgym.judges.unittest_tests import UnittestJudge
from execgym.limits import DEFAULT_LIMITS, Limits
from execgym.ops.breakers import Breakers, dataset_of, is_infrastructure_failure
from execgym.ops.metrics import Metrics
from execgym.reward import RewardBreakdown, RewardSpec, binary_reward, evaluate
from execgym.reward.coverage import measure_coverage
from execgym.reward.evaluate import check_tools
from execgym.sandbox.base import Sandbox, Status
from execgym.tasks.extract import extract_code
from execgym.tasks.loaders import LineProblem, RolloutLine
from execgym.tasks.models import Rollout, Task

log = logging.getLogger(__name__)

TAIL_BYTES = 2000
"""How much of the end of stdout and stderr each result keeps."""

SANDBOX_ATTEMPTS = 2
"""A ``sandbox_error`` is retried once; if it fails again, the reward is masked."""

DETERMINISTIC_REFUSALS = frozenset({"UnsupportedArgument"})
"""Harness refusals (``ErrorDetail.type``) a retry would repeat word for word: the task's
tests pass what the harness cannot carry across its plain-data boundary. They stay
``sandbox_error`` (our limit, masked) but are not retried, nor logged twice."""


@dataclass(frozen=True, slots=True)
class ScoredRollout:
    """The result for one rollout: one line of the results JSONL.

    Attributes:
        index: 0-based position of the rollout in its input (its line among non-blank
            lines), so results can always be matched to rollouts.
        task_id: The task.
        rollout_id: The caller's id, or ``"<task_id>#<index>"`` when none was given.
        verdict: The outcome.
        reward: 1.0 or 0.0; ``None`` when masked (``sandbox_error``, ``invalid``,
            ``language_unavailable``, ``quarantined``).
        judgement: The judge's evidence (``None`` for invalid input).
        isolation: The sandbox backend, ``"none"`` when not isolated.
        attempts: Sandbox runs made (2 when a sandbox error was retried).
        message: Why, for humans.
        reward_breakdown: Every component of the reward, when the scorer has a
            :class:`~execgym.reward.RewardSpec` (``reward`` is then its total).
        limits: The effective limits it ran under
            (:func:`~execgym.judges.effective.effective_limits`: the run's, after the
            task's overrides and its per-case rule, with the stack and compile limits
            where they apply); ``None`` when it was not judged.
    """

    index: int
    task_id: str
    rollout_id: str
    verdict: Verdict
    reward: float | None
    judgement: Judgement | None
    isolation: str
    attempts: int = 1
    message: str = ""
    reward_breakdown: RewardBreakdown | None = None
    limits: Mapping[str, Any] | None = None
    calibration: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON object written to the results file (one line per rollout)."""
        run = self.judgement.run if self.judgement else None
        error = self.judgement.error if self.judgement else None
        return {
            "index": self.index,
            "task_id": self.task_id,
            "rollout_id": self.rollout_id,
            "verdict": self.verdict.value,
            "reward": self.reward,
            "wall_time_s": round(run.wall_time_s, 4) if run else None,
            "cpu_time_s": round(run.cpu_time_s, 4) if run else None,
            "peak_memory_bytes": run.peak_memory_bytes if run else None,
            "processes_started": run.processes_started if run else None,
            "bytes_written": run.bytes_written if run else None,
            "exit_code": run.exit_code if run else None,
            "signal": run.signal if run else None,
            "limit_hit": run.limit_hit if run else None,
            "stdout_tail": _tail(run.stdout) if run else "",
            "stderr_tail": _tail(run.stderr) if run else "",
            "stdout_truncated": run.stdout_truncated if run else False,
            "stderr_truncated": run.stderr_truncated if run else False,
            "error": None
            if error is None
            else {"type": error.type, "message": error.message, "traceback": error.traceback},
            "message": self.message,
            "isolation": self.isolation,
            "enforcement": dict(run.enforcement) if run else {},
            "limits": dict(self.limits) if self.limits is not None else None,
            **({"calibration": dict(self.calibration)} if self.calibration is not None else {}),
            "attempts": self.attempts,
            "details": dict(self.judgement.details) if self.judgement else {},
            **(
                {"reward_breakdown": self.reward_breakdown.to_json()}
                if self.reward_breakdown is not None
                else {}
            ),
        }

    def with_output_tail(self, size: int) -> ScoredRollout:
        """This result, keeping only the last ``size`` bytes of the run's stdout and stderr.

        What the results file shows is unchanged (it keeps :data:`TAIL_BYTES`, and
        ``stdout_truncated`` / ``stderr_truncated`` still say whether the program wrote
        more than its output limit); only the memory a held result takes shrinks.
        """
        run = self.judgement.run if self.judgement else None
        if run is None or (len(run.stdout) <= size and len(run.stderr) <= size):
            return self
        run = dataclasses.replace(
            run,
            stdout=run.stdout[max(0, len(run.stdout) - size) :],
            stderr=run.stderr[max(0, len(run.stderr) - size) :],
        )
        judgement = dataclasses.replace(self.judgement, run=run)  # type: ignore[arg-type]
        return dataclasses.replace(self, judgement=judgement)


def _echoed_limits(
    task: Task, limits: Limits, calibration: Calibration | None = None
) -> dict[str, Any] | None:
    """The effective limits of ``task``'s runs for the result (``None`` if unusable).

    With a calibration, its time limits replace the user's (they are never above them).
    """
    if calibration is not None:
        echoed = _echoed_limits(task, limits)
        if echoed is not None:
            echoed["wall_time_s"] = calibration.wall_time_s
            echoed["cpu_time_s"] = calibration.cpu_time_s
            if calibration.case_time_limit_s is not None:
                echoed["case_time_limit_s"] = calibration.case_time_limit_s
        return echoed
    try:
        return effective_limits(task, limits)
    except Error:  # the task's limits are invalid: it was not judged under any
        return None


def _tail(data: bytes) -> str:
    return data[-TAIL_BYTES:].decode("utf-8", errors="replace")


def _invalid(
    index: int, task_id: str, rollout_id: str, message: str, isolation: str
) -> ScoredRollout:
    return ScoredRollout(
        index,
        task_id,
        rollout_id,
        Verdict.INVALID,
        None,
        Judgement(Verdict.INVALID, message=message, error=ErrorDetail("InvalidInput", message)),
        isolation,
        attempts=0,
        message=message,
    )


class Scorer:
    """Judges rollouts against tasks in a sandbox, with limits and retries.

    Args:
        tasks: ``{task_id: Task}``.
        sandbox: Where programs run.
        limits: Limits for every run, overridden per task by ``Task.limits``.
        skipped_tasks: ``{task_id: why}`` for tasks left out of ``tasks`` because they
            were invalid, so their rollouts are told why rather than "unknown task".
        builder: Compiles sources, with its cache (default: :func:`Builder` on the
            default cache directory).

    Each task goes to the judge of its ``kind`` (``assert`` in Python:
    :class:`AssertJudge`; in other languages :class:`NativeAssertJudge`; ``stdio``:
    :class:`StdioJudge`; ``function_call``: :class:`FunctionCallJudge`; ``pytest``:
    :class:`PytestJudge`; ``unittest``: :class:`UnittestJudge`). A completion holding
    markdown fences is reduced to its code first by
    :func:`~execgym.tasks.extract.extract_code`.

        reward: How to turn a judgement into a reward; ``None`` is the binary reward
            (1.0 for a pass) without a breakdown.
        breakers: Circuit breakers per task type: a rollout of a quarantined type is
            ``quarantined`` at once, without a sandbox; each outcome is recorded.
        metrics: Where to count each finished rollout (by verdict and task type).
        state: ``fresh`` or ``shared``: overrides every task's ``state`` (Python assert
            and function-call tasks: whether each call of the tests sees the solution's
            module as freshly imported); ``None`` keeps each task's.
        calibrator: Calibrates each task's time limits from its reference solution
            (:mod:`execgym.calibration`); the results then carry ``calibration``.

    Raises:
        ConfigError: if ``reward`` needs a tool (ruff, radon, bandit) that is missing.
    """

    def __init__(
        self,
        tasks: dict[str, Task],
        sandbox: Sandbox,
        limits: Limits = DEFAULT_LIMITS,
        skipped_tasks: Mapping[str, str] | None = None,
        builder: Builder | None = None,
        reward: RewardSpec | None = None,
        *,
        breakers: Breakers | None = None,
        metrics: Metrics | None = None,
        state: str | None = None,
        calibrator: Calibrator | None = None,
    ) -> None:
        if state is not None:  # every task's `state`, overridden (the CLI's --state)
            tasks = {key: task.model_copy(update={"state": state}) for key, task in tasks.items()}
        self.tasks = tasks
        self.breakers = breakers
        self.metrics = metrics
        self.skipped_tasks = dict(skipped_tasks or {})
        self.sandbox = sandbox
        self.limits = limits
        self.builder = builder or Builder()
        self.judge = AssertJudge()
        self.reward = reward
        self.calibrator = calibrator
        if reward is not None:
            check_tools(reward)

    # The other kinds' judges are made on first use: each builds (compiles) its harness,
    # which a batch of one kind never runs, and the command line's start waits for it.
    @functools.cached_property
    def _native(self) -> NativeAssertJudge:
        return NativeAssertJudge(self.builder)

    @functools.cached_property
    def _stdio(self) -> StdioJudge:
        return StdioJudge(self.builder)

    @functools.cached_property
    def _call(self) -> FunctionCallJudge:
        return FunctionCallJudge()

    @functools.cached_property
    def _pytest(self) -> PytestJudge:
        return PytestJudge()

    @functools.cached_property
    def _unittest(self) -> UnittestJudge:
        return UnittestJudge()

    async def judge_rollout(self, task: Task, rollout: Rollout, limits: Limits) -> Judgement:
        """Judge one rollout of ``task`` with the judge of the task's kind.

        The reward specification decides what the Python assert judge measures besides
        the verdict: passing cases (partial credit) and the reference's cost.
        """
        completion = extract_code(rollout.completion, task.language)
        if task.kind == "stdio":
            return await self._stdio.judge(task, completion, self.sandbox, limits)
        if task.kind == "function_call":
            return await self._call.judge(task, completion, self.sandbox, limits)
        if task.kind == "pytest":
            return await self._pytest.judge(task, completion, self.sandbox, limits, rollout.files)
        if task.kind == "unittest":
            return await self._unittest.judge(task, completion, self.sandbox, limits)
        if task.language != "python":
            return await self._native.judge(task, completion, self.sandbox, limits)
        return await self._judge(task, completion, limits)

    async def _judge_reference(self, task: Task, completion: str, limits: Limits) -> Judgement:
        rollout = Rollout(task_id=task.task_id, completion=completion)
        return await self.judge_rollout(task, rollout, limits)

    async def self_test(self) -> None:
        """Score a known-good rollout once, so a broken sandbox stops a batch at once.

        A host where the sandbox cannot run the harness at all (the interpreter is not
        visible inside, bwrap cannot mount, the limits are too small to start Python)
        would otherwise mask every rollout of the batch as ``sandbox_error``.

        Raises:
            SandboxSetupFailed: with the reason, if the known-good rollout does not pass.
        """
        task = Task(
            task_id="execgym/self-test",
            prompt="def f():\n",
            entry_point="f",
            tests="def check(candidate):\n    assert candidate() == 1\n",
        )
        judgement = await self.judge.judge(task, "    return 1\n", self.sandbox, self.limits)
        if judgement.verdict is not Verdict.PASSED:
            run = judgement.run
            too_small = (
                judgement.verdict in (Verdict.TIMEOUT, Verdict.MEMORY_EXCEEDED)
                or (judgement.error is not None and judgement.error.type == "MemoryError")
                or (run is not None and run.status in (Status.TIME_LIMIT, Status.MEMORY_LIMIT))
                or (run is not None and b"MemoryError" in run.stderr)
            )
            hint = (
                f"; the limits ({self.limits.wall_time_s:g} s, "
                f"{self.limits.memory_bytes / 2**20:g} MiB) may be too small to start Python: "
                "raise them (--timeout / --memory on the command line)"
                if too_small
                else ""
            )
            raise SandboxSetupFailed(
                f"the {self.sandbox.name} sandbox failed its self-test with a known-good "
                f"program ({judgement.verdict.value}): {judgement.message}{hint}"
            )

    async def _judge(self, task: Task, completion: str, limits: Limits) -> Judgement:
        spec = self.reward
        if spec is not None and spec.needs_coverage:  # the completion is tests
            return await measure_coverage(task, completion, self.sandbox, limits)
        return await self.judge.judge(
            task,
            completion,
            self.sandbox,
            limits,
            cases=spec is not None and spec.needs_cases,
            measure_reference=spec is not None and spec.needs_reference,
        )

    async def score_one(self, item: RolloutLine | LineProblem) -> ScoredRollout:
        """Score one rollout (or turn an unusable line into an ``invalid`` result)."""
        isolation = self.sandbox.name
        if isinstance(item, LineProblem):
            task_id = item.task_id or ""  # the line's, when it could be read
            result = _invalid(item.index, task_id, f"line-{item.line_number}", str(item), isolation)
            return self._finished(result, "unknown")
        rollout = item.rollout
        rollout_id = rollout.rollout_id or f"{rollout.task_id}#{item.index}"
        task = self.tasks.get(rollout.task_id)
        if task is None:
            skipped = self.skipped_tasks.get(rollout.task_id)
            message = (
                f"task {rollout.task_id!r} was skipped because it is invalid: {skipped}"
                if skipped
                else f"unknown task_id {rollout.task_id!r}: no such task in the tasks file; "
                "check the rollout's task_id"
            )
            result = _invalid(item.index, rollout.task_id, rollout_id, message, isolation)
            return self._finished(result, "unknown")
        task_type = self.task_type(task)
        if self.breakers is None:
            result = await self._score_task(item.index, task, rollout, rollout_id)
            return self._finished(result, task_type)
        ticket = self.breakers.admit(task)
        if ticket is None:
            message = self.breakers.quarantine_message(task_type)
            judgement = Judgement(Verdict.QUARANTINED, message=message)
            result = ScoredRollout(
                item.index, task.task_id, rollout_id, Verdict.QUARANTINED, None, judgement,
                isolation, attempts=0, message=message,
            )  # fmt: skip
            return self._finished(result, task_type)
        result = await self._score_task(item.index, task, rollout, rollout_id)
        failed = result.judgement is not None and is_infrastructure_failure(result.judgement)
        self.breakers.record(ticket, infrastructure_failure=failed)
        return self._finished(result, task_type)

    def task_type(self, task: Task) -> str:
        """The type of ``task`` for breakers and metrics (the breakers' key, else data set)."""
        return self.breakers.type_of(task) if self.breakers is not None else dataset_of(task)

    def _finished(self, result: ScoredRollout, task_type: str) -> ScoredRollout:
        if self.metrics is not None:
            self.metrics.job_done(result.verdict.value, task_type, result.verdict.is_masked)
        log.info(
            "scored",
            extra={
                "task_id": result.task_id,
                "rollout_id": result.rollout_id,
                "task_type": task_type,
                "verdict": result.verdict.value,
            },
        )
        return result

    async def _score_task(
        self, index: int, task: Task, rollout: Rollout, rollout_id: str
    ) -> ScoredRollout:
        isolation = self.sandbox.name
        judgement: Judgement | None = None
        attempt = 0
        judged, calibration = task, None
        try:
            limits = task.limits_over(self.limits)
            if self.calibrator is not None:
                judged, limits, calibration = await self.calibrator.calibrate(
                    task, limits, self._judge_reference
                )
        except (TaskError, ConfigError) as error:  # the task's or the settings' fault
            return _invalid(index, task.task_id, rollout_id, str(error), isolation)
        for attempt in range(1, SANDBOX_ATTEMPTS + 1):
            try:
                judgement = await self.judge_rollout(judged, rollout, limits)
            except (TaskError, ConfigError) as error:  # the task's or the settings' fault
                return _invalid(index, task.task_id, rollout_id, str(error), isolation)
            except Error as error:  # the sandbox or the host could not do its job
                log.warning("sandbox_failed task_id=%s: %s", task.task_id, error)
                judgement = Judgement(
                    Verdict.SANDBOX_ERROR, message=f"{type(error).__name__}: {error}"
                )
            except Exception as error:  # our bug: masked, never counted by a breaker
                log.exception("judge_crashed task_id=%s", task.task_id)
                judgement = Judgement(Verdict.SANDBOX_ERROR, message=f"internal error: {error!r}")
            if judgement.verdict is not Verdict.SANDBOX_ERROR:
                break
            deterministic = judgement.error is not None and (
                judgement.error.type in DETERMINISTIC_REFUSALS
            )
            log.warning(
                "sandbox_error task_id=%s attempt=%d%s: %s",
                task.task_id,
                attempt,
                " (deterministic: not retried)" if deterministic else "",
                judgement.message,
            )
            if deterministic:
                break
        if judgement is None:  # the loop runs at least once
            raise RuntimeError("no attempt was made to judge the rollout")
        reward = binary_reward(judgement.verdict)
        breakdown = None
        if self.reward is not None:
            breakdown = await evaluate(self.reward, task, rollout.completion, judgement)
            reward = breakdown.total
        return ScoredRollout(
            index=index,
            task_id=task.task_id,
            rollout_id=rollout_id,
            verdict=judgement.verdict,
            reward=reward,
            judgement=judgement,
            isolation=judgement.run.isolation if judgement.run else isolation,
            attempts=attempt,
            message=judgement.message,
            reward_breakdown=breakdown,
            limits=_echoed_limits(task, self.limits, calibration),
            calibration=calibration.to_json() if calibration is not None else None,
        )

    async def score(
        self,
        items: Iterable[Rollout | RolloutLine | LineProblem],
        *,
        workers: int | None = None,
        on_result: Callable[[ScoredRollout], None] | None = None,
        order: str = "completion",
        window: int | None = None,
        collect: bool = True,
        output_tail: int | None = None,
    ) -> list[ScoredRollout]:
        """Score every item with ``workers`` sandboxes at once (default: CPU count).

        Args:
            items: Rollouts in input order, read lazily (an item is taken only when a
                sandbox is free for it): plain :class:`Rollout` objects (numbered by
                their position, so the first has ``index`` 0), or
                :class:`RolloutLine` and :class:`LineProblem` items from
                :func:`~execgym.tasks.loaders.load_rollouts`.
            workers: Sandboxes running at once.
            on_result: Called with each result: as soon as it is ready with
                ``order="completion"``; with ``order="input"``, in the order the items
                came, as soon as every earlier one is ready.
            order: ``"completion"`` or ``"input"`` (for ``on_result``). In input order
                the results that wait for an earlier, slower one are held in a reorder
                buffer of at most ``window`` results: a sandbox that is free takes no
                new item while the buffer is full. On cancellation the held results
                are handed over first (in order, past the unfinished ones).
            window: Items taken but not yet handed to ``on_result`` in input order, at
                most (default: :data:`REORDER_WINDOW_PER_WORKER` per worker, at least
                :data:`REORDER_WINDOW_MIN`).
            collect: Whether to keep every result and return them. ``False`` keeps
                none (memory stays flat however long the batch) and returns ``[]``.
            output_tail: Keep only the last this many bytes of each result's captured
                stdout and stderr (``None``: all of it, up to the output limit). The
                results file keeps :data:`TAIL_BYTES`.

        Returns:
            All results, in input order (``[]`` when not ``collect``).

        Raises:
            TypeError: if an item is none of these types (the items before it are scored).
            ValueError: if ``order`` is neither value, or ``window`` is below 1.
        """
        if order not in ("completion", "input"):
            raise ValueError(f"order={order!r}: give 'completion' or 'input'")
        count = max(1, workers or os.cpu_count() or 1)
        room = window or max(REORDER_WINDOW_MIN, REORDER_WINDOW_PER_WORKER * count)
        if room < 1:
            raise ValueError(f"window={window!r}: give at least 1")
        iterator = _numbered(items)
        results: list[ScoredRollout] = []
        bad_items: list[TypeError] = []
        reorder = _Reorder(on_result if order == "input" else None, room)

        async def worker() -> None:
            while not bad_items:
                await reorder.wait_for_room()
                try:
                    item = next(iterator)  # shared iterator: each item is taken by one worker
                except StopIteration:
                    return
                except TypeError as error:
                    bad_items.append(error)
                    return
                position = reorder.take()  # no await since the check: the window holds
                result = await self.score_one(item)
                if output_tail is not None:
                    result = result.with_output_tail(output_tail)
                if collect:
                    results.append(result)
                if order == "input":
                    reorder.put(position, result)
                elif on_result is not None:
                    on_result(result)

        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(count):
                    group.create_task(worker())
        finally:
            reorder.flush()  # cancelled: what finished is handed over, in order
        if bad_items:
            raise bad_items[0]
        return sorted(results, key=lambda r: r.index)


REORDER_WINDOW_PER_WORKER = 64
"""Reorder buffer of :meth:`Scorer.score` in input order: results held per worker."""

REORDER_WINDOW_MIN = 256
"""... and at least this many, so one runaway rollout rarely stalls the other sandboxes.

A held result is small when ``output_tail`` is set (the CLI: about 5 KB), so the
default window costs well under 10 MB at 8 workers."""


class _Reorder:
    """Hands results to ``emit`` in the order their items were taken, within a window."""

    def __init__(self, emit: Callable[[ScoredRollout], None] | None, window: int) -> None:
        self._emit = emit
        self._window = window
        self._taken = 0
        self._next = 0  # the position handed over next
        self._held: dict[int, ScoredRollout] = {}
        self._room = asyncio.Event()
        self._room.set()

    async def wait_for_room(self) -> None:
        while self._emit is not None and self._taken - self._next >= self._window:
            self._room.clear()
            await self._room.wait()

    def take(self) -> int:
        self._taken += 1
        return self._taken - 1

    def put(self, position: int, result: ScoredRollout) -> None:
        if self._emit is None:
            raise RuntimeError("put() before the buffer was given its writer")
        self._held[position] = result
        while self._next in self._held:
            result = self._held.pop(self._next)
            self._next += 1
            self._emit(result)
        self._room.set()

    def flush(self) -> None:
        if self._emit is None:
            return
        for position in sorted(self._held):
            self._emit(self._held.pop(position))


def _numbered(items: Iterable[object]) -> Iterator[RolloutLine | LineProblem]:
    """Each item as a :class:`RolloutLine` (a bare rollout gets its position as index).

    Raises:
        TypeError: at the first item that is not a rollout.
    """
    for position, item in enumerate(items):
        if isinstance(item, Rollout):
            yield RolloutLine(position, item)
        elif isinstance(item, RolloutLine | LineProblem):
            yield item
        else:
            raise TypeError(
                f"Scorer.score: item {position} is a {type(item).__name__}; give Rollout "
                "objects (or RolloutLine / LineProblem items from load_rollouts)"
            )
