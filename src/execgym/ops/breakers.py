"""Circuit breakers per task type: stop burning compute on a type that keeps crashing.

A *task type* is what one breaker guards, chosen by a key (:data:`TYPE_KEYS` or your
own function of the task): the data set (the part of the task id before the first
``/``, so ``HumanEval/12`` is ``HumanEval``), the task family (``kind/language``, such
as ``stdio/cpp``), or the task id itself.

Only **infrastructure failures** count (:func:`is_infrastructure_failure`, decided by
:func:`execgym.judges.masking.counts_toward_breaker`): a ``sandbox_error`` whose run proves
the infrastructure failed (the sandbox's own setup failure, a harness that never
started or could not load), and a job dead-lettered because it crashed or killed its
worker. The model's own wrong answers (``failed``, ``error``, ``timeout``,
``memory_exceeded``...) never do, nor does any failure a rollout can trigger, even a
masked one (a task's checker crashing on its output, an exception of execgym's host
code on its data): five garbage rollouts must never quarantine a data set.

States (the ``execgym_breaker_state`` gauge: 0, 1, 2)::

    closed ──(failures pass the threshold in the window)──▶ open
    open ──(cooldown_s passed)──▶ half_open: one probe job is let through
    half_open ──probe succeeds──▶ closed      half_open ──probe fails──▶ open

While open (and while a probe is out), new jobs of the type get the ``quarantined``
verdict (reward masked) at once, without a sandbox. An operator can close a breaker
with :meth:`Breakers.reset` (``execgym status --reset TYPE``).

>>> clock = [0.0]
>>> policy = BreakerPolicy(failures=2, window_s=60, cooldown_s=30)
>>> breakers = Breakers(policy, clock=lambda: clock[0])
>>> from execgym.tasks.models import Task
>>> task = Task(task_id="Broken/1", prompt="def f(): ...", tests="def check(c): ...",
...             entry_point="f")
>>> for _ in range(2):
...     breakers.record(breakers.admit(task), infrastructure_failure=True)
>>> breakers.admit(task) is None, breakers.state("Broken").name
(True, 'OPEN')
>>> clock[0] = 31.0
>>> probe = breakers.admit(task)
>>> breakers.record(probe, infrastructure_failure=False)
>>> breakers.state("Broken").name
'CLOSED'
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from execgym.errors import ConfigError

if TYPE_CHECKING:  # not imported at run time: ``execgym score`` parses --breakers early
    from execgym.judges.base import Judgement
    from execgym.tasks.models import Task

log = logging.getLogger(__name__)

TaskTypeKey = Callable[["Task"], str]
"""A function naming the type of a task: one breaker (and one metrics label) per type."""


def dataset_of(task: Task) -> str:
    """The data set: the task id up to its first ``/`` (``HumanEval/3`` → ``HumanEval``)."""
    return task.task_id.split("/", 1)[0] if "/" in task.task_id else task.task_id


def family_of(task: Task) -> str:
    """The task family: ``kind/language``, e.g. ``assert/python`` or ``stdio/cpp``."""
    return f"{task.kind}/{task.language}"


def task_id_of(task: Task) -> str:
    """The task id itself: one breaker per task."""
    return task.task_id


TYPE_KEYS: dict[str, TaskTypeKey] = {
    "dataset": dataset_of,
    "family": family_of,
    "task": task_id_of,
}
"""The named task-type keys (``--breaker-key``, ``EXECGYM_SERVER_BREAKER_KEY``)."""


def type_key(key: str | TaskTypeKey) -> TaskTypeKey:
    """The key function for a name of :data:`TYPE_KEYS`, or ``key`` itself if callable.

    Raises:
        ConfigError: for an unknown name.
    """
    if callable(key):
        return key
    try:
        return TYPE_KEYS[key]
    except KeyError:
        raise ConfigError(
            f"unknown task-type key {key!r}: choose one of {sorted(TYPE_KEYS)}, or pass a "
            "function of the task"
        ) from None


def is_infrastructure_failure(judgement: Judgement) -> bool:
    """Whether ``judgement`` proves our side failed (counted by breakers), not the model.

    See :func:`execgym.judges.masking.counts_toward_breaker`, where the rule is written.
    """
    # Imported here: importing execgym.judges loads every judge, the task models and
    # pydantic, and ``execgym score`` imports this module to parse --breakers at start.
    from execgym.judges.masking import counts_toward_breaker

    return counts_toward_breaker(judgement)


class BreakerState(enum.IntEnum):
    """A breaker's state; its value is the ``execgym_breaker_state`` gauge's."""

    CLOSED = 0
    HALF_OPEN = 1
    OPEN = 2


@dataclass(frozen=True, slots=True)
class BreakerPolicy:
    """When a breaker opens and how long it stays open.

    Args:
        failures: Infrastructure failures within ``window_s`` that open the breaker
            (``None``: the count alone never opens it).
        failure_rate: Fraction of the jobs within ``window_s`` that failed (0 to 1)
            from which the breaker opens, once at least ``min_jobs`` finished in the
            window (``None``: the rate is not checked).
        min_jobs: Jobs in the window before ``failure_rate`` is checked.
        window_s: The sliding window, in seconds.
        cooldown_s: Seconds an open breaker waits before letting one probe through;
            also how long a probe may stay out before another is let through (a probe
            whose result never comes must not keep the type quarantined forever).

    Raises:
        ConfigError: if a number is out of range, or neither threshold is set.
    """

    failures: int | None = 5
    failure_rate: float | None = None
    min_jobs: int = 10
    window_s: float = 60.0
    cooldown_s: float = 30.0

    def __post_init__(self) -> None:
        if self.failures is None and self.failure_rate is None:
            raise ConfigError("BreakerPolicy: set failures, failure_rate or both")
        if self.failures is not None and self.failures < 1:
            raise ConfigError(f"BreakerPolicy.failures must be at least 1, got {self.failures}")
        if self.failure_rate is not None and not 0 < self.failure_rate <= 1:
            raise ConfigError(
                f"BreakerPolicy.failure_rate must be in (0, 1], got {self.failure_rate}"
            )
        if self.min_jobs < 1:
            raise ConfigError(f"BreakerPolicy.min_jobs must be at least 1, got {self.min_jobs}")
        for name in ("window_s", "cooldown_s"):
            value = getattr(self, name)
            if not (value > 0 and value < float("inf")):
                raise ConfigError(f"BreakerPolicy.{name} must be positive and finite, got {value}")


@dataclass(frozen=True, slots=True)
class Ticket:
    """Permission to run one job of a type; hand it back with :meth:`Breakers.record`.

    Attributes:
        task_type: The type.
        probe: Whether this job is the half-open breaker's probe.
    """

    task_type: str
    probe: bool = False


@dataclass(frozen=True, slots=True)
class BreakerView:
    """A breaker as ``/v1/status`` and ``execgym status`` show it.

    Attributes:
        task_type: The type.
        state: Its state.
        failures: Infrastructure failures in the window.
        jobs: Jobs finished in the window.
        quarantined: Jobs refused since it last opened.
        retry_in_s: Seconds until a probe is let through (open only), else ``None``.
        reason: Why it opened, for humans (``""`` when closed).
    """

    task_type: str
    state: BreakerState
    failures: int
    jobs: int
    quarantined: int
    retry_in_s: float | None
    reason: str

    def to_json(self) -> dict[str, object]:
        """The view as JSON."""
        return {
            "task_type": self.task_type,
            "state": self.state.name.lower(),
            "state_value": int(self.state),
            "failures": self.failures,
            "jobs": self.jobs,
            "quarantined": self.quarantined,
            "retry_in_s": None if self.retry_in_s is None else round(self.retry_in_s, 3),
            "reason": self.reason,
        }


class _Breaker:
    """One type's breaker; its :class:`Breakers` holds the lock."""

    def __init__(self, policy: BreakerPolicy) -> None:
        self.policy = policy
        self.state = BreakerState.CLOSED
        self.events: deque[tuple[float, bool]] = deque()  # (finished at, failed)
        self.failed = 0
        self.opened_at = 0.0
        self.probe_at: float | None = None
        self.quarantined = 0
        self.reason = ""

    def prune(self, now: float) -> None:
        horizon = now - self.policy.window_s
        while self.events and self.events[0][0] < horizon:
            _, failed = self.events.popleft()
            self.failed -= failed

    def tripped(self) -> str:
        """Why the breaker must open now, or ``""``."""
        policy = self.policy
        if policy.failures is not None and self.failed >= policy.failures:
            return f"{self.failed} infrastructure failures in {policy.window_s:g} s"
        jobs = len(self.events)
        rate = policy.failure_rate
        if rate is not None and jobs >= policy.min_jobs and self.failed / jobs >= rate:
            return (
                f"{self.failed} of {jobs} jobs in {policy.window_s:g} s were infrastructure "
                f"failures (threshold {rate:.0%})"
            )
        return ""


class BreakerGate(Protocol):
    """What :func:`execgym.scoring.core.score_rollout` asks of breakers, per rollout.

    :class:`Breakers` (this process's) and :class:`Decided` (a shared board's decision,
    fetched before the rollout runs) are gates.
    """

    @property
    def type_of(self) -> TaskTypeKey:
        """The task-type key."""
        ...

    def admit(self, task: Task) -> Ticket | None:
        """A ticket to run a job of ``task``, or ``None``: quarantine it."""
        ...

    def quarantine_message(self, task_type: str) -> str:
        """Why a job of ``task_type`` was quarantined."""
        ...

    def record(self, ticket: Ticket, *, infrastructure_failure: bool) -> None:
        """The outcome of a job admitted with ``ticket``."""
        ...


class SharedBreakers(Protocol):
    """Breakers held outside the worker, shared by every worker (Redis, a Ray actor).

    Implemented by :class:`execgym.broker.redis_breakers.RedisBreakers`; a Ray board
    is adapted to it by :mod:`execgym.broker.ray_actors`.
    """

    async def admit(self, task_type: str) -> tuple[Ticket | None, str]:
        """``(ticket, "")`` when a job of ``task_type`` may run, else ``(None, why)``."""
        ...

    async def record(self, ticket: Ticket, infrastructure_failure: bool) -> None:
        """The outcome of a job admitted with ``ticket``."""
        ...


@dataclass(slots=True)
class Decided:
    """Shared breakers as one job sees them: the board's decision, fetched before it ran.

    The board (in Redis, or a Ray actor) holds the breakers of many workers.
    ``score_rollout`` calls a gate without awaiting, so the worker asks the board first
    (:attr:`ticket` or, when quarantined, :attr:`message`), scores the rollout with this
    gate, then tells the board :attr:`failed` (``None``: nothing was recorded).

    Attributes:
        type_of: The task-type key.
        ticket: The board's ticket, or ``None`` (quarantined).
        message: Why it was quarantined (``""`` with a ticket).
        failed: What the scorer recorded: whether the job was an infrastructure
            failure (by :func:`is_infrastructure_failure`, the one masking rule).
    """

    type_of: TaskTypeKey
    ticket: Ticket | None
    message: str = ""
    failed: bool | None = None

    def admit(self, task: Task) -> Ticket | None:
        """The board's ticket."""
        return self.ticket

    def quarantine_message(self, task_type: str) -> str:
        """The board's reason."""
        return self.message

    def record(self, ticket: Ticket, *, infrastructure_failure: bool) -> None:
        """Keep the outcome for the worker to tell the board."""
        self.failed = infrastructure_failure


class Breakers:
    """The circuit breakers of every task type, safe to share between tasks and threads.

    Args:
        policy: Thresholds, window and cool-down (the same for every type).
        key: Which task type a task is: a name of :data:`TYPE_KEYS` or a function.
        clock: Monotonic seconds; injectable for tests.

    Raises:
        ConfigError: for an unknown ``key`` name.
    """

    def __init__(
        self,
        policy: BreakerPolicy | None = None,
        *,
        key: str | TaskTypeKey = "dataset",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy = policy or BreakerPolicy()
        self.type_of: TaskTypeKey = type_key(key)
        self.key_name = key if isinstance(key, str) else None  # for other processes
        self._clock = clock
        self._lock = threading.Lock()
        self._breakers: dict[str, _Breaker] = {}

    def _get(self, task_type: str) -> _Breaker:
        breaker = self._breakers.get(task_type)
        if breaker is None:
            breaker = self._breakers[task_type] = _Breaker(self.policy)
        return breaker

    def admit(self, task: Task) -> Ticket | None:
        """Whether a job of ``task`` may run now.

        Returns:
            A :class:`Ticket` to pass to :meth:`record` with the outcome, or ``None``:
            the type is quarantined, give the job the ``quarantined`` verdict.
        """
        task_type = self.type_of(task)
        now = self._clock()
        with self._lock:
            breaker = self._get(task_type)
            if breaker.state is BreakerState.CLOSED:
                return Ticket(task_type)
            if breaker.state is BreakerState.OPEN and now - breaker.opened_at >= (
                self.policy.cooldown_s
            ):
                breaker.state = BreakerState.HALF_OPEN
                breaker.probe_at = None
                log.warning("breaker_half_open task_type=%s", task_type)
            if breaker.state is BreakerState.HALF_OPEN and (
                breaker.probe_at is None or now - breaker.probe_at >= self.policy.cooldown_s
            ):
                breaker.probe_at = now
                return Ticket(task_type, probe=True)
            breaker.quarantined += 1
            return None

    def record(self, ticket: Ticket, *, infrastructure_failure: bool) -> None:
        """The outcome of a job admitted with ``ticket``.

        A probe's outcome closes (success) or reopens (failure) a half-open breaker;
        other outcomes count in the window of a closed breaker (those of jobs admitted
        before the breaker opened are ignored once it is open).
        """
        now = self._clock()
        with self._lock:
            breaker = self._get(ticket.task_type)
            if ticket.probe and breaker.state is BreakerState.HALF_OPEN:
                if infrastructure_failure:
                    self._open(ticket.task_type, breaker, now, "the probe job failed again")
                else:
                    self._close(ticket.task_type, breaker, "the probe job succeeded")
                return
            if breaker.state is not BreakerState.CLOSED:
                return
            breaker.events.append((now, infrastructure_failure))
            breaker.failed += infrastructure_failure
            breaker.prune(now)
            reason = breaker.tripped() if infrastructure_failure else ""
            if reason:
                self._open(ticket.task_type, breaker, now, reason)

    def record_failure(self, task: Task) -> None:
        """Count an infrastructure failure of ``task`` that ran without a ticket.

        For failures seen outside a scored job, such as a job dead-lettered because
        every delivery crashed or killed its worker.
        """
        self.record(Ticket(self.type_of(task)), infrastructure_failure=True)

    def _open(self, task_type: str, breaker: _Breaker, now: float, reason: str) -> None:
        breaker.state = BreakerState.OPEN
        breaker.opened_at = now
        breaker.probe_at = None
        breaker.quarantined = 0
        breaker.reason = reason
        log.warning(
            "breaker_opened task_type=%s reason=%s cooldown_s=%g",
            task_type,
            reason,
            self.policy.cooldown_s,
        )

    def _close(self, task_type: str, breaker: _Breaker, why: str) -> None:
        breaker.state = BreakerState.CLOSED
        breaker.events.clear()
        breaker.failed = 0
        breaker.probe_at = None
        breaker.reason = ""
        log.warning("breaker_closed task_type=%s: %s", task_type, why)

    def reset(self, task_type: str) -> bool:
        """Close ``task_type``'s breaker and forget its failures (an operator's reset).

        Returns:
            ``False`` if no breaker of that type exists (nothing of it ran).
        """
        with self._lock:
            breaker = self._breakers.get(task_type)
            if breaker is None:
                return False
            self._close(task_type, breaker, "reset by an operator")
            return True

    def state(self, task_type: str) -> BreakerState:
        """The state of ``task_type``'s breaker (``CLOSED`` if it never saw a job)."""
        view = self.views().get(task_type)
        return view.state if view is not None else BreakerState.CLOSED

    def views(self) -> dict[str, BreakerView]:
        """Every breaker's state, by type (an open one past its cool-down shows half-open)."""
        now = self._clock()
        views = {}
        with self._lock:
            for task_type, breaker in self._breakers.items():
                breaker.prune(now)
                state, retry_in_s = breaker.state, None
                if state is BreakerState.OPEN:
                    retry_in_s = max(0.0, breaker.opened_at + self.policy.cooldown_s - now)
                    if retry_in_s == 0:
                        state = BreakerState.HALF_OPEN
                views[task_type] = BreakerView(
                    task_type,
                    state,
                    breaker.failed,
                    len(breaker.events),
                    breaker.quarantined,
                    retry_in_s,
                    breaker.reason,
                )
        return views

    def quarantine_message(self, task_type: str) -> str:
        """Why a job of ``task_type`` was quarantined, and what to do about it."""
        view = self.views().get(task_type)
        if view is None:
            return quarantine_message(task_type, "", None)
        return quarantine_message(task_type, view.reason, view.retry_in_s)


def quarantine_message(task_type: str, reason: str, retry_in_s: float | None) -> str:
    """Why a job of ``task_type`` was quarantined, and what to do about it.

    One wording for every holder of breakers (this process's, Redis's, a Ray board's).

    Args:
        task_type: The quarantined type.
        reason: Why its breaker opened (``""``: not known).
        retry_in_s: Seconds until a probe job is let through (``None`` or 0: one is
            running now).
    """
    why = f" ({reason})" if reason else ""
    retry = (
        f"; a probe job is let through in {retry_in_s:.0f} s"
        if retry_in_s
        else "; a probe job is running"
    )
    return (
        f"task type {task_type!r} is quarantined: its circuit breaker is open after "
        f"repeated infrastructure failures{why}{retry}; not run (reward masked). Fix "
        f"the cause, then reset it with `execgym status --reset {task_type}`"
    )


DEFAULT_SPEC = "failures=5,window_s=60,cooldown_s=30,key=dataset"
"""The breakers ``execgym score``, ``worker`` and ``serve`` use unless told otherwise."""


def from_spec(spec: str, *, clock: Callable[[], float] = time.monotonic) -> Breakers | None:
    """Breakers from a ``--breakers`` value: ``off``, or ``name=value`` pairs.

    The names are :class:`BreakerPolicy`'s fields (``failures``, ``failure_rate``,
    ``min_jobs``, ``window_s``, ``cooldown_s``; ``failures=none`` drops the count
    threshold) and ``key`` (a name of :data:`TYPE_KEYS`); unnamed fields keep their
    defaults. Example: ``failures=3,window_s=120,cooldown_s=60,key=family``.

    Returns:
        The breakers, or ``None`` for ``off``.

    Raises:
        ConfigError: naming the bad part and the accepted names.
    """
    text = spec.strip()
    if text.lower() in ("off", "none", "0", "false"):
        return None
    fields: dict[str, object] = {}
    key = "dataset"
    casts: dict[str, Callable[[str], object]] = {
        "failures": int,
        "failure_rate": float,
        "min_jobs": int,
        "window_s": float,
        "cooldown_s": float,
    }
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or (name not in casts and name != "key"):
            raise ConfigError(
                f"breakers: {part!r} is not NAME=VALUE with NAME one of "
                f"{', '.join([*casts, 'key'])} (or give 'off'); e.g. {DEFAULT_SPEC}"
            )
        if name == "key":
            type_key(value)  # raises for an unknown name
            key = value
        elif value.lower() == "none" and name in ("failures", "failure_rate"):
            fields[name] = None
        else:
            try:
                fields[name] = casts[name](value)
            except ValueError:
                raise ConfigError(f"breakers: {name}={value!r} is not a number") from None
    return Breakers(BreakerPolicy(**fields), key=key, clock=clock)  # type: ignore[arg-type]
