"""Score a batch of rollouts: each in its own sandbox, concurrently, in a chosen order.

One bad rollout never sinks the batch: a malformed line or an unknown task becomes an
``invalid`` result, and every result is handed to ``on_result`` as soon as it exists
(or as soon as every earlier one has been, in input order), so nothing already scored
is lost if the run is interrupted. Each rollout is scored by
:func:`execgym.scoring.core.score_rollout`; what a batch adds is its tasks, its
concurrency and its order.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from execgym.errors import Error
from execgym.judges.base import Judgement, JudgeSet
from execgym.limits import DEFAULT_LIMITS, Limits
from execgym.scoring.core import Scoring, score_rollout, score_unusable
from execgym.scoring.results import ScoredRollout
from execgym.scoring.selftest import self_test
from execgym.tasks.loaders import LineProblem, RolloutLine
from execgym.tasks.models import Rollout, Task

if TYPE_CHECKING:  # imported by whoever gives them (a batch without them needs none)
    from execgym.calibration import Calibrator
    from execgym.environments.routing import EnvironmentSandboxes
    from execgym.judges.compile import Builder
    from execgym.ops.breakers import Breakers
    from execgym.ops.metrics import Metrics
    from execgym.reward import RewardSpec
    from execgym.sandbox.base import Sandbox


class Scorer:
    """Scores batches of rollouts against a set of tasks, in a sandbox.

    Args:
        tasks: ``{task_id: Task}``.
        sandbox: Where programs run.
        limits: Limits for every run, overridden per task by ``Task.limits``.
        skipped_tasks: ``{task_id: why}`` for tasks left out of ``tasks`` because they
            were invalid, so their rollouts are told why rather than "unknown task".
        builder: Compiles sources, with its cache (default: :func:`Builder` on the
            default cache directory).
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
        environments: Where tasks that name an ``environment`` run (see
            :class:`~execgym.scoring.core.Scoring`); call :meth:`aclose` to stop them.
        diagnose: The diagnostics every rollout that passes gets (``leaks``,
            ``hotspots``, ``complexity``: :mod:`execgym.diagnostics`); ``None`` takes
            each task's ``diagnose`` field (none without it), ``()`` none at all.

    Each task goes to the judge of its kind (:meth:`JudgeSet.judge_for
    <execgym.judges.base.JudgeSet.judge_for>`), through
    :func:`~execgym.scoring.core.score_rollout`; :attr:`scoring` holds the sandbox,
    the judges and the hooks.

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
        environments: EnvironmentSandboxes | None = None,
        diagnose: tuple[str, ...] | None = None,
    ) -> None:
        if state is not None:  # every task's `state`, overridden (the CLI's --state)
            tasks = {key: task.model_copy(update={"state": state}) for key, task in tasks.items()}
        self.tasks = tasks
        self.skipped_tasks = dict(skipped_tasks or {})
        self.scoring = Scoring(
            sandbox,
            limits,
            reward=reward,
            builder=builder,
            breakers=breakers,
            metrics=metrics,
            calibrator=calibrator,
            environments=environments,
            diagnose=diagnose,
        )

    @property
    def sandbox(self) -> Sandbox:
        """Where programs run."""
        return self.scoring.sandbox

    @property
    def limits(self) -> Limits:
        """Limits for every run, before each task's overrides."""
        return self.scoring.limits

    @property
    def judges(self) -> JudgeSet:
        """The judge of each kind of task, made on first use."""
        return self.scoring.judges

    async def judge_rollout(self, task: Task, rollout: Rollout, limits: Limits) -> Judgement:
        """Judge one rollout of ``task`` once, without retries, reward or hooks.

        See :meth:`execgym.scoring.core.Scoring.judge`.
        """
        return await self.scoring.judge(task, rollout, limits)

    async def aclose(self) -> None:
        """Stop the sandboxes made for tasks' environments (not :attr:`sandbox`)."""
        await self.scoring.aclose()

    async def self_test(self) -> None:
        """Score a known-good rollout once, so a broken sandbox stops a batch at once.

        Raises:
            SandboxSetupFailed: with the reason, if the known-good rollout does not pass
                (see :func:`execgym.scoring.selftest.self_test`).
        """
        await self_test(self.sandbox, self.limits)

    def task_type(self, task: Task) -> str:
        """The type of ``task`` for breakers and metrics (the breakers' key, else data set)."""
        return self.scoring.task_type(task)

    async def score_one(self, item: RolloutLine | LineProblem) -> ScoredRollout:
        """Score one rollout (or turn an unusable line into an ``invalid`` result)."""
        return await _score_item(self.scoring, self.tasks, item, None, self.skipped_tasks)

    async def score(
        self,
        items: Iterable[Rollout | RolloutLine | LineProblem]
        | AsyncIterable[Rollout | RolloutLine | LineProblem],
        *,
        workers: int | None = None,
        on_result: Callable[[ScoredRollout], None] | None = None,
        order: str = "completion",
        window: int | None = None,
        collect: bool = True,
        output_tail: int | None = None,
    ) -> list[ScoredRollout]:
        """Score every item with ``workers`` sandboxes at once (default: CPU count).

        :func:`score_batch` over this scorer's tasks; see it for the arguments, the
        order, what is returned and what is raised.
        """
        return await score_batch(
            self.scoring,
            self.tasks,
            items,
            skipped_tasks=self.skipped_tasks,
            workers=workers,
            on_result=on_result,
            order=order,
            window=window,
            collect=collect,
            output_tail=output_tail,
        )


async def score_batch(
    scoring: Scoring,
    tasks: Mapping[str, Task],
    items: Iterable[Rollout | RolloutLine | LineProblem]
    | AsyncIterable[Rollout | RolloutLine | LineProblem],
    *,
    limits: Limits | None = None,
    skipped_tasks: Mapping[str, str] | None = None,
    workers: int | None = None,
    on_result: Callable[[ScoredRollout], None] | None = None,
    order: str = "completion",
    window: int | None = None,
    collect: bool = True,
    output_tail: int | None = None,
) -> list[ScoredRollout]:
    """Score every item with ``workers`` sandboxes at once (default: CPU count).

    Each rollout is scored by :func:`~execgym.scoring.core.score_rollout` with the task
    its ``task_id`` names; an unusable line, or a rollout of a task not in ``tasks``, is
    ``invalid`` (:func:`~execgym.scoring.core.score_unusable`).

    Args:
        scoring: The sandbox, judges, reward and hooks.
        tasks: ``{task_id: Task}``.
        items: Rollouts in input order, read lazily (an item is taken only when a
            sandbox is free for it): plain :class:`Rollout` objects (numbered by
            their position, so the first has ``index`` 0), or
            :class:`RolloutLine` and :class:`LineProblem` items from
            :func:`~execgym.tasks.loaders.load_rollouts`. An async iterable (an
            ``async def`` generator fed by a trainer) is read the same way, one item
            at a time.
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
            :data:`REORDER_WINDOW_MIN`); in either order, the most items set aside
            while their task's reference is measured (``calibrator``).
        collect: Whether to keep every result and return them. ``False`` keeps
            none (memory stays flat however long the batch) and returns ``[]``.
        output_tail: Keep only the last this many bytes of each result's captured
            stdout and stderr (``None``: all of it, up to the output limit). The
            results file keeps :data:`~execgym.scoring.results.TAIL_BYTES`.
        limits: Limits of the batch's runs before each task's overrides (default:
            ``scoring.limits``).
        skipped_tasks: ``{task_id: why}`` for tasks left out of ``tasks`` because they
            were invalid, so their rollouts are told why rather than "unknown task".

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
    results: list[ScoredRollout] = []
    bad_items: list[TypeError] = []
    reorder = _Reorder(on_result if order == "input" else None, room)
    source = _anumbered(items) if isinstance(items, AsyncIterable) else _numbered(items)
    intake = _Intake(source, reorder, _measuring(scoring, tasks, limits), room)

    async def worker() -> None:
        while not bad_items:
            try:
                taken = await intake.take()
            except TypeError as error:
                bad_items.append(error)
                return
            if taken is None:
                return
            position, item = taken
            result = await _score_item(scoring, tasks, item, limits, skipped_tasks)
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


def _measuring(
    scoring: Scoring, tasks: Mapping[str, Task], limits: Limits | None
) -> Callable[[RolloutLine | LineProblem], asyncio.Future[Any] | None]:
    """What an item would wait for before its run: its task's reference being measured.

    The calibration :func:`~execgym.scoring.core.score_rollout` would wait for (the
    batch's calibrator, the task's limits over the batch's), or ``None``.
    """
    calibrator = scoring.calibrator
    measuring = getattr(calibrator, "measuring", None)

    def waits_for(item: RolloutLine | LineProblem) -> asyncio.Future[Any] | None:
        if measuring is None or not isinstance(item, RolloutLine):
            return None
        task = tasks.get(item.rollout.task_id)
        if task is None:
            return None
        try:
            task_limits = task.limits_over(limits or scoring.limits)
        except Error:  # judged invalid when scored: nothing to wait for
            return None
        future: asyncio.Future[Any] | None = measuring(task, task_limits)
        return future

    return waits_for


class _Intake:
    """Hands the workers the items, in input order but for those that would only wait.

    A rollout of a task whose reference another sandbox is measuring (the batch's
    calibrator) would hold its sandbox idle until the measurement is made: it is set
    aside instead, and the sandbox takes the next item. Set-aside items keep their
    place in the reorder buffer and are handed out first once their task is measured.
    With rollouts grouped by task (a trainer's group of samples), every sandbox but
    the measuring one used to wait for each task's reference (issue 23). At most
    ``most_aside`` items are set aside: then the sandbox waits for a measurement (in
    completion order, a batch of one task used to be read whole into this list while
    its reference ran).
    """

    def __init__(
        self,
        iterator: Iterator[RolloutLine | LineProblem] | AsyncIterator[RolloutLine | LineProblem],
        reorder: _Reorder,
        waits_for: Callable[[RolloutLine | LineProblem], asyncio.Future[Any] | None],
        most_aside: int,
    ) -> None:
        self._most_aside = most_aside
        self._iterator = iterator
        self._reorder = reorder
        self._waits_for = waits_for
        self._aside: list[tuple[asyncio.Future[Any], int, RolloutLine | LineProblem]] = []
        self._exhausted = False
        self._reading = asyncio.Lock()  # an async source: one worker reads it at a time

    async def take(self) -> tuple[int, RolloutLine | LineProblem] | None:
        """The next item to score and its position, or ``None`` when there are none.

        Raises:
            TypeError: at an item that is not a rollout (from :func:`_numbered`).
        """
        while True:
            for place, (future, position, item) in enumerate(self._aside):
                if future.done():
                    del self._aside[place]
                    return position, item
            pending = [future for future, _, _ in self._aside]
            if self._exhausted or len(pending) >= self._most_aside:
                if not pending:
                    return None
                await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                continue
            await self._reorder.wait_for_room(*pending)
            if self._reorder.full():
                continue  # a set-aside item is ready: it is taken first
            if isinstance(self._iterator, AsyncIterator):
                async with self._reading:
                    if self._exhausted or self._reorder.full():
                        continue  # another worker read meanwhile: check again
                    try:
                        item = await anext(self._iterator)
                    except StopAsyncIteration:
                        self._exhausted = True
                        continue
                    position = self._reorder.take()  # under the lock: the window holds
            else:
                try:
                    item = next(self._iterator)  # shared: each item is taken by one worker
                except StopIteration:
                    self._exhausted = True
                    continue
                position = self._reorder.take()  # no await since the check: the window holds
            measuring = self._waits_for(item)
            if measuring is None:
                return position, item
            self._aside.append((measuring, position, item))


async def _score_item(
    scoring: Scoring,
    tasks: Mapping[str, Task],
    item: RolloutLine | LineProblem,
    limits: Limits | None,
    skipped_tasks: Mapping[str, str] | None,
) -> ScoredRollout:
    task = tasks.get(item.rollout.task_id) if isinstance(item, RolloutLine) else None
    if task is None or not isinstance(item, RolloutLine):
        return score_unusable(
            item,
            skipped_tasks=skipped_tasks,
            isolation=scoring.sandbox.name,
            metrics=scoring.metrics,
        )
    return await score_rollout(scoring, task, item.rollout, index=item.index, limits=limits)


REORDER_WINDOW_PER_WORKER = 64
"""Reorder buffer of :func:`score_batch` in input order: results held per worker."""

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

    def full(self) -> bool:
        return self._emit is not None and self._taken - self._next >= self._window

    async def wait_for_room(self, *also: asyncio.Future[Any]) -> None:
        """Until there is room in the window, or one of ``also`` is done."""
        while self.full() and not any(future.done() for future in also):
            self._room.clear()
            room = asyncio.ensure_future(self._room.wait())
            try:
                await asyncio.wait({room, *also}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                room.cancel()

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


async def _anumbered(items: AsyncIterable[object]) -> AsyncIterator[RolloutLine | LineProblem]:
    """:func:`_numbered` of an async iterable.

    Raises:
        TypeError: at the first item that is not a rollout.
    """
    position = 0
    async for item in items:
        for numbered in _numbered([item], position):
            yield numbered
        position += 1


def _numbered(items: Iterable[object], start: int = 0) -> Iterator[RolloutLine | LineProblem]:
    """Each item as a :class:`RolloutLine` (a bare rollout gets its position as index).

    Raises:
        TypeError: at the first item that is not a rollout.
    """
    for position, item in enumerate(items, start):
        if isinstance(item, Rollout):
            yield RolloutLine(position, item)
        elif isinstance(item, RolloutLine | LineProblem):
            yield item
        else:
            raise TypeError(
                f"score_batch: item {position} is a {type(item).__name__}; give Rollout "
                "objects (or RolloutLine / LineProblem items from load_rollouts)"
            )
