"""The Ray backend: score a batch on the Ray cluster a trainer already runs.

``execgym score --broker ray`` attaches to the running cluster (``ray.init(address=
"auto")``, as a trainer's process does); ``--broker ray://HOST:PORT`` goes through Ray
Client. No queue service: the sandbox workers are Ray actors
(:class:`~execgym.broker.ray_actors.SandboxActor`), one per node by default, placed
with the ``SPREAD`` strategy, each holding its own warm pool; the caller hands each
actor at most ``2 x concurrency`` jobs at once (the actor runs ``concurrency``, Ray
queues the rest on it), so a batch of any size flows at the cluster's pace.

Delivery: a job is on one actor at a time. When an actor or its node dies
(``RayActorError``), every job it held goes to a live actor, counting an attempt; a
job whose ``max_attempts`` deliveries all died is given up with a masked
``sandbox_error`` result that says so. A ``sandbox_error`` result is tried once more
on another actor, as an ``execgym worker`` hands it back. Each job yields exactly one
result (the first), whatever died.

Results are the embedded broker's, field by field: the actor runs the same
:func:`~execgym.scoring.core.score_rollout` and returns the same
:class:`~execgym.broker.messages.ResultMessage`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

from execgym.broker.base import BrokerSettings
from execgym.broker.messages import JobMessage, ResultMessage
from execgym.broker.ray_actors import ActorConfig, BreakerBoard, SandboxActor
from execgym.errors import BrokerError, BrokerUnavailable, ConfigError
from execgym.judges.base import ErrorDetail, Judgement, Verdict
from execgym.ops.breakers import BreakerPolicy, type_key
from execgym.scoring.results import ScoredRollout

log = logging.getLogger(__name__)

NAMESPACE = "execgym"
"""The Ray namespace of execgym's actors (the breaker board is named in it)."""

BOARD_NAME = "execgym-breakers"
"""The breaker board's actor name: ``execgym status --broker ray`` reads it."""


def ray_address(url: str) -> str:
    """The ``ray.init`` address of a broker URL: ``ray`` -> ``auto``; ``ray://...`` as is.

    Raises:
        ConfigError: for any other URL.
    """
    if url == "ray":
        return "auto"
    if url.startswith("ray://"):
        return url
    raise ConfigError(f"not a Ray broker URL: {url!r}; use 'ray' or ray://HOST:PORT")


def connect(url: str = "ray") -> Any:
    """Attach to the Ray cluster of ``url`` unless this process is attached already.

    Returns:
        The ``ray`` module.

    Raises:
        ConfigError: Ray is not installed.
        BrokerUnavailable: no cluster answers at that address.
    """
    try:
        import ray
    except ImportError as error:
        raise ConfigError(
            "--broker ray needs Ray: pip install 'ray==2.55.0' (the cluster's version)"
        ) from error
    if not ray.is_initialized():
        address = ray_address(url)
        try:
            ray.init(address=address, namespace=NAMESPACE, log_to_driver=False)
        except (ConnectionError, RuntimeError) as error:
            raise BrokerUnavailable(
                f"no Ray cluster at {address!r}: {error}. Start one (ray start --head) or "
                "run inside the trainer's cluster; for a remote one use ray://HOST:10001"
            ) from error
    return ray


@dataclass
class _Slot:
    """One live actor and the jobs it holds now."""

    handle: Any
    info: dict[str, object]
    held: int = 0


@dataclass
class RayBroker:
    """Scores jobs on Ray actors; used like a broker by :func:`~execgym.broker.score_jobs`.

    Args:
        url: ``ray`` (attach to the running cluster) or ``ray://HOST:PORT``.
        config: The actors' sandbox, reward and breaker key.
        actors: How many sandbox actors (default: one per alive node).
        concurrency: Sandboxes (jobs at once) per actor (default: the CPUs of the
            cluster divided among the actors, at least 1).
        cpus_per_actor: CPUs each actor reserves in Ray's accounting (default:
            ``concurrency``), so the trainer's own tasks are not placed on them.
        breakers: The cluster's breaker policy (``None``: no breakers).
        max_attempts: Deliveries of one job that may die with their actor, or end in a
            ``sandbox_error``, before it is given up.
        start_timeout_s: How long the actors may take to be placed and self-tested.
        settings: Kept for the broker interface (:class:`BrokerSettings`).

    Raises:
        ConfigError: a number out of range, or Ray missing.
    """

    url: str = "ray"
    config: ActorConfig = field(default_factory=ActorConfig)
    actors: int | None = None
    concurrency: int | None = None
    cpus_per_actor: float | None = None
    breakers: BreakerPolicy | None = None
    max_attempts: int = 3
    start_timeout_s: float = 300.0
    settings: BrokerSettings = field(default_factory=BrokerSettings)
    name: str = "ray"
    _slots: list[_Slot] = field(default_factory=list)
    _board: Any = None
    _capacity: int = 2
    _freed: asyncio.Event = field(default_factory=asyncio.Event)
    _starting: asyncio.Lock = field(default_factory=asyncio.Lock)

    def __post_init__(self) -> None:
        ray_address(self.url)
        for what in ("actors", "concurrency", "max_attempts"):
            value = getattr(self, what)
            if value is not None and value < 1:
                raise ConfigError(f"RayBroker.{what} must be at least 1, got {value}")
        self.name = self.url

    async def start(self) -> list[dict[str, object]]:
        """Place the actors (SPREAD) and wait until each sandbox passed its self-test.

        Returns:
            Each actor's ``{name, node_id, pid, isolation}``.

        Raises:
            BrokerUnavailable: no cluster, or the actors were not ready in time (the
                cluster has no free CPUs for them, or a node cannot run the sandbox).
        """
        async with self._starting:  # concurrent callers (a trainer's samples) start one set
            if not self._slots:
                await self._start()
        return [slot.info for slot in self._slots]

    async def _start(self) -> None:
        ray = connect(self.url)
        alive = [node for node in ray.nodes() if node.get("Alive")]
        count = self.actors or max(1, len(alive))
        total_cpus = sum(float(node.get("Resources", {}).get("CPU", 0)) for node in alive)
        concurrency = self.concurrency or max(1, int(total_cpus // count))
        cpus = concurrency if self.cpus_per_actor is None else self.cpus_per_actor
        if self.breakers is not None:
            board_class = ray.remote(BreakerBoard)
            self._board = board_class.options(
                name=BOARD_NAME,
                namespace=NAMESPACE,
                get_if_exists=True,
                num_cpus=0,
                lifetime="detached",  # outlives a batch: the cluster's breakers, for status
            ).remote(self.breakers)
        actor_class = ray.remote(SandboxActor)
        handles = [
            actor_class.options(
                num_cpus=cpus,
                max_concurrency=concurrency,
                scheduling_strategy="SPREAD",
                max_restarts=0,
            ).remote(self.config, self._board, f"ray-actor-{i}")
            for i in range(count)
        ]
        try:
            infos = await asyncio.wait_for(
                asyncio.gather(*(h.ready.remote() for h in handles)), self.start_timeout_s
            )
        except TimeoutError as error:
            for handle in handles:
                ray.kill(handle)
            raise BrokerUnavailable(
                f"{count} sandbox actor(s) of {cpus:g} CPU(s) each were not ready within "
                f"{self.start_timeout_s:g} s: the cluster ({total_cpus:g} CPUs on "
                f"{len(alive)} nodes) may have no free CPUs for them; pass fewer actors or "
                "a smaller cpus_per_actor"
            ) from error
        self._slots = [_Slot(h, dict(info), 0) for h, info in zip(handles, infos, strict=True)]
        self._capacity = 2 * concurrency
        log.info("ray_workers_ready actors=%d concurrency=%d", count, concurrency)

    @property
    def handles(self) -> list[Any]:
        """The live sandbox actors' handles (after :meth:`start`)."""
        return [slot.handle for slot in self._slots]

    @property
    def board(self) -> Any:
        """The breaker board actor's handle (``None`` without breakers)."""
        return self._board

    async def ping(self) -> None:
        """Attach to the cluster and start the actors (raises as :meth:`start`)."""
        await self.start()

    async def live_workers(self) -> dict[str, dict[str, object]]:
        """The live actors by name, with the jobs each holds."""
        now = time.time()
        return {
            str(slot.info["name"]): {**slot.info, "running": slot.held, "at": now}
            for slot in self._slots
        }

    async def breaker_views(self) -> list[dict[str, object]]:
        """The cluster's breakers as one view (``[]`` without breakers)."""
        if self._board is None:
            return []
        views: list[dict[str, object]] = await self._board.views.remote()
        return views

    async def queued(self) -> int:
        """Jobs held by the actors now."""
        return sum(slot.held for slot in self._slots)

    async def score_jobs(
        self, jobs: Iterable[JobMessage] | AsyncIterable[JobMessage]
    ) -> AsyncIterator[ResultMessage]:
        """Score ``jobs`` on the actors; yield one result per job as each finishes.

        ``jobs`` is read as the actors free up (a job is taken only when one has room),
        so a generator is never read ahead of the cluster: the caller holds the jobs in
        flight, at most ``2 x concurrency`` per actor, plus those it made itself
        (:class:`~execgym.broker.window.Window` feeds it its window).

        Raises:
            BrokerError: every actor died with jobs left.
        """
        await self.start()
        import ray.exceptions

        source = _async_jobs(jobs)
        waiting: deque[tuple[JobMessage, int]] = deque()  # jobs to deliver again
        running: dict[asyncio.Future[Any], tuple[JobMessage, int, _Slot]] = {}
        taking: asyncio.Future[JobMessage] | None = None  # the next job of the source
        exhausted = False
        taken = 0
        try:
            while True:
                self._dispatch(waiting, running)
                if taking is None and not exhausted and not waiting and self._has_room():
                    taking = asyncio.ensure_future(anext(source))
                if exhausted and not waiting and not running:
                    return
                if not running and taking is None:
                    if self._slots:  # every actor is full of others' jobs
                        self._freed.clear()
                        await self._freed.wait()
                        continue
                    raise BrokerError(
                        f"every Ray sandbox actor died; {len(waiting)} of the {taken} jobs "
                        "taken so far (and any not yet taken) were not scored (see the "
                        "cluster's logs: ray status)"
                    )
                pending = {*running, *([taking] if taking is not None else [])}
                finished, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                if taking is not None and taking in finished:
                    finished.discard(taking)
                    try:
                        waiting.append((taking.result(), 1))
                        taken += 1
                    except StopAsyncIteration:
                        exhausted = True
                    taking = None
                for future in finished:
                    result = self._finished(future, running, waiting, ray.exceptions)
                    if result is not None:
                        yield result
        finally:
            if taking is not None:
                taking.cancel()
            for future in running:
                future.cancel()
                running[future][2].held -= 1
            self._freed.set()

    def _has_room(self) -> bool:
        return any(slot.held < self._capacity for slot in self._slots)

    def _finished(
        self,
        future: asyncio.Future[Any],
        running: dict[asyncio.Future[Any], tuple[JobMessage, int, _Slot]],
        waiting: deque[tuple[JobMessage, int]],
        exceptions: Any,
    ) -> ResultMessage | None:
        """The result of a finished delivery, or ``None`` when its job goes again.

        A job is on one actor at a time, so each job gives exactly one result.
        """
        job, attempt, slot = running.pop(future)
        slot.held -= 1
        self._freed.set()
        error = future.exception()
        if isinstance(error, exceptions.RayActorError):
            self._bury(slot, error)
            return self._again(job, attempt, waiting, str(error))
        if error is not None:
            raise error
        result = ResultMessage.from_json(future.result())
        if (
            result.result.get("verdict") == Verdict.SANDBOX_ERROR.value
            and attempt < self.max_attempts
            and len(self._slots) > 1
        ):
            waiting.appendleft((job, attempt + 1))  # another node may work
            return None
        return result

    def _dispatch(
        self,
        waiting: deque[tuple[JobMessage, int]],
        running: dict[asyncio.Future[Any], tuple[JobMessage, int, _Slot]],
    ) -> None:
        """Hand waiting jobs to the least busy live actors, up to each one's capacity."""
        while waiting and self._slots:
            slot = min(self._slots, key=lambda s: s.held)
            if slot.held >= self._capacity:
                return
            job, attempt = waiting.popleft()
            ref = slot.handle.judge.remote(job.to_json(), attempt)
            running[asyncio.ensure_future(_awaited(ref))] = (job, attempt, slot)
            slot.held += 1

    def _bury(self, slot: _Slot, error: BaseException) -> None:
        if slot in self._slots:
            self._slots.remove(slot)
            log.warning(
                "ray_actor_died name=%s node=%s: %s; its jobs go to %d live actor(s)",
                slot.info.get("name"),
                slot.info.get("node_id"),
                type(error).__name__,
                len(self._slots),
            )

    def _again(
        self, job: JobMessage, attempt: int, waiting: deque[tuple[JobMessage, int]], why: str
    ) -> ResultMessage | None:
        """Queue a job whose actor died again, or give it up after ``max_attempts``."""
        if attempt < self.max_attempts:
            waiting.appendleft((job, attempt + 1))
            return None
        reason = (
            f"given up after {attempt} attempt(s): the Ray actor running it died each time "
            f"(last: {why.splitlines()[0][:300]}); the reward is masked"
        )
        if self._board is not None:
            self._board.record_failure.remote(type_key(self.config.breaker_key)(job.task))
        scored = ScoredRollout(
            index=job.index,
            task_id=job.task.task_id,
            rollout_id=job.rollout.rollout_id or f"{job.task.task_id}#{job.index}",
            verdict=Verdict.SANDBOX_ERROR,
            reward=None,
            judgement=Judgement(
                Verdict.SANDBOX_ERROR, message=reason, error=ErrorDetail("ActorDied", reason)
            ),
            isolation=self.config.isolation,
            attempts=attempt,
            message=reason,
        )
        return ResultMessage.of(job, scored, worker="ray", attempt=attempt, dead=True)

    async def aclose(self) -> None:
        """Close the actors' sandboxes and end the actors (the board stays for status)."""
        slots, self._slots = self._slots, []
        if not slots:
            return
        import ray

        with contextlib.suppress(Exception):
            await asyncio.wait_for(
                asyncio.gather(*(s.handle.close.remote() for s in slots), return_exceptions=True),
                30,
            )
        for slot in slots:
            with contextlib.suppress(Exception):
                ray.kill(slot.handle)


async def cluster_status(url: str = "ray", reset: str | None = None) -> dict[str, Any]:
    """The cluster's breakers (one view) and nodes, for ``execgym status --broker ray``.

    Args:
        url: ``ray`` or ``ray://HOST:PORT``.
        reset: A task type whose breaker to close first (an operator's reset).

    Returns:
        ``{"nodes": alive nodes, "cpus": their CPUs, "breakers": [view JSON...] or
        None when no batch with breakers has run on the cluster, "reset": bool}``.

    Raises:
        BrokerUnavailable: no cluster at ``url``.
    """
    ray = connect(url)
    alive = [node for node in ray.nodes() if node.get("Alive")]
    answer: dict[str, Any] = {
        "nodes": len(alive),
        "cpus": sum(float(node.get("Resources", {}).get("CPU", 0)) for node in alive),
        "breakers": None,
        "reset": False,
    }
    try:
        board = ray.get_actor(BOARD_NAME, namespace=NAMESPACE)
    except ValueError:  # no batch with breakers has run on this cluster
        return answer
    if reset is not None:
        answer["reset"] = await board.reset.remote(reset)
    answer["breakers"] = await board.views.remote()
    return answer


async def _awaited(ref: Any) -> Any:
    return await ref


async def _async_jobs(
    jobs: Iterable[JobMessage] | AsyncIterable[JobMessage],
) -> AsyncIterator[JobMessage]:
    """``jobs`` as an async iterator (a list or generator is read one job at a time)."""
    if isinstance(jobs, AsyncIterable):
        async for job in jobs:
            yield job
    else:
        for job in jobs:
            yield job
