"""What runs on a Ray cluster's nodes: sandbox workers and the shared breaker board.

Both are plain classes here, made Ray actors by :mod:`execgym.broker.ray_broker`
(``ray.remote(SandboxActor)``), so this module imports without Ray and Ray pickles the
classes by reference (every node imports ``execgym`` from its own installation).

- :class:`SandboxActor`: one per node (or per N CPUs), holding its own sandbox (the
  warm pool by default) and scoring jobs with
  :func:`execgym.scoring.core.score_rollout`, exactly as an ``execgym worker`` does.
  Its ``max_concurrency`` is its number of sandboxes: calls beyond it wait in Ray's
  queue for the actor (the back-pressure).
- :class:`BreakerBoard`: one per cluster batch, holding the circuit breakers of every
  task type. Each worker asks it before a job runs and tells it the outcome, so a type
  whose jobs fail on one node is quarantined on every node, and ``execgym status``
  reads one view.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from execgym.broker.messages import JobMessage, ResultMessage
from execgym.broker.validation_jobs import validation_result, worker_read_only_paths
from execgym.ops.breakers import BreakerPolicy, Breakers, Ticket, dataset_of, type_key
from execgym.ops.logs import log_context
from execgym.reward import RewardSpec
from execgym.scoring.core import Scoring, score_rollout, score_shared, score_unusable
from execgym.tasks.loaders import RolloutLine


def _same(task_type: Any) -> str:
    """The board's breakers are keyed by the type the worker already computed."""
    return str(task_type)


class BreakerBoard:
    """The circuit breakers of a whole cluster, in one actor (one lock, one view).

    Args:
        policy: Thresholds, window and cool-down, as :class:`~execgym.ops.breakers.Breakers`.
    """

    def __init__(self, policy: BreakerPolicy | None = None) -> None:
        self.breakers = Breakers(policy, key=_same)

    def admit(self, task_type: str) -> tuple[Ticket | None, str]:
        """``(ticket, "")`` when a job of ``task_type`` may run, else ``(None, why)``."""
        ticket = self.breakers.admit(task_type)  # type: ignore[arg-type]
        if ticket is None:
            return None, self.breakers.quarantine_message(task_type)
        return ticket, ""

    def record(self, ticket: Ticket, infrastructure_failure: bool) -> None:
        """The outcome of a job admitted with ``ticket``."""
        self.breakers.record(ticket, infrastructure_failure=infrastructure_failure)

    def record_failure(self, task_type: str) -> None:
        """An infrastructure failure outside a scored job (a job every worker died on)."""
        self.breakers.record(Ticket(task_type), infrastructure_failure=True)

    def views(self) -> list[dict[str, object]]:
        """Every breaker as :meth:`~execgym.ops.breakers.BreakerView.to_json`."""
        return [view.to_json() for view in self.breakers.views().values()]

    def reset(self, task_type: str) -> bool:
        """Close ``task_type``'s breaker (an operator's reset); ``False`` if none."""
        return self.breakers.reset(task_type)


@dataclass(frozen=True)
class _RayBoard:
    """A :class:`BreakerBoard` actor's handle as :class:`~execgym.ops.breakers.SharedBreakers`."""

    handle: Any

    async def admit(self, task_type: str) -> tuple[Ticket | None, str]:
        answer: tuple[Ticket | None, str] = await self.handle.admit.remote(task_type)
        return answer

    async def record(self, ticket: Ticket, infrastructure_failure: bool) -> None:
        await self.handle.record.remote(ticket, infrastructure_failure)


def _client_env_cache() -> str:
    from execgym.environments.cache import default_cache_dir

    return str(default_cache_dir())


def _client_env_store() -> str | None:
    return os.environ.get("EXECGYM_STORE") or None


@dataclass(frozen=True)
class ActorConfig:
    """How each sandbox actor is made (sent to the actor when it starts).

    Args:
        isolation: The sandbox backend (``bwrap``, ``gvisor``, ``none``).
        warm_pool: Fork Python rollouts from a warm interpreter (bwrap).
        allow_root: Let ``isolation="none"`` run as root.
        reward: The reward spec every result is rewarded with (``None``: binary).
        breaker_key: How a task's type is named for the breakers (``dataset``...).
        diagnose: Diagnostics for every passing rollout (``None``: each task's own).
        env_cache: The environment cache directory tasks' environments are read from
            (default: the client's, ``$EXECGYM_ENV_CACHE`` or its default, read where
            the config is made). An actor on a node without that directory uses its
            node's default cache instead (see docs/ray.md for several nodes).
        env_store: The object store missing environments are pulled from (default: the
            client's ``$EXECGYM_STORE``; ``None``: none).
    """

    isolation: str = "bwrap"
    warm_pool: bool = True
    allow_root: bool = False
    reward: RewardSpec | None = None
    breaker_key: str = "dataset"
    diagnose: tuple[str, ...] | None = None
    env_cache: str | None = field(default_factory=_client_env_cache)
    env_store: str | None = field(default_factory=_client_env_store)

    def environments(self, sandbox: Any) -> Any:
        """The :class:`~execgym.environments.routing.EnvironmentSandboxes` of ``sandbox``.

        On the cache ``env_cache`` names when this node has that directory (one machine,
        or a shared file system), else this node's default cache; pulling from
        ``env_store`` when set.
        """
        from execgym.environments.cache import EnvironmentCache
        from execgym.environments.routing import EnvironmentSandboxes

        cache = None
        if self.env_cache is not None and Path(self.env_cache).is_dir():
            cache = EnvironmentCache(Path(self.env_cache))
        store = None
        if self.env_store is not None:
            from execgym.storage import open_store

            store = open_store(self.env_store)
        return EnvironmentSandboxes(sandbox, cache=cache, store=store)


class SandboxActor:
    """A sandbox worker as a Ray actor: scores job messages, returns result messages.

    Args:
        config: The sandbox, reward and breaker key.
        board: The :class:`BreakerBoard` actor's handle, or ``None`` for no breakers.
        name: The worker's name in results (default ``ray-<host>-<pid>``).

    The sandbox is opened (and self-tested) by :meth:`ready`, on the actor's own event
    loop, before the first job.
    """

    def __init__(
        self, config: ActorConfig, board: Any | None = None, name: str | None = None
    ) -> None:
        self.config = config
        self.board = board
        self.name = name or f"ray-{socket.gethostname()}-{os.getpid()}"
        self.type_of = type_key(config.breaker_key) if board is not None else dataset_of
        self._scoring: Scoring | None = None
        self._env_base: Any = None

    async def ready(self) -> dict[str, object]:
        """Open and self-test the sandbox; where this actor runs.

        Raises:
            SandboxSetupFailed: the sandbox failed its self-test on this node.
            SandboxUnavailable: the backend cannot run on this node.
        """
        if self._scoring is None:
            from execgym.sandbox import open_sandbox
            from execgym.scoring.selftest import self_test

            config = self.config
            sandbox = open_sandbox(  # coverage's site read-only: validation jobs need it
                config.isolation,
                warm_pool=config.warm_pool,
                allow_root=config.allow_root,
                read_only_paths=worker_read_only_paths(),
            )
            await self_test(sandbox)
            # tasks' environments get an execgym worker's sandbox: the host paths bound
            # for validation jobs above do not exist in (and cannot be made in) them
            self._env_base = open_sandbox(
                config.isolation, warm_pool=config.warm_pool, allow_root=config.allow_root
            )
            self._scoring = Scoring(
                sandbox,
                reward=config.reward,
                diagnose=config.diagnose,
                environments=config.environments(self._env_base),
            )
        import ray

        return {
            "name": self.name,
            "node_id": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
            "isolation": self._scoring.sandbox.name,
        }

    async def judge(self, job_json: str, attempt: int = 1) -> str:
        """Score one job (a :class:`JobMessage` as JSON); its :class:`ResultMessage` JSON.

        A rollout naming another task than the job's is ``invalid``, as in a batch.
        """
        await self.ready()
        scoring = self._scoring
        if scoring is None:  # ready() made it
            raise RuntimeError("the actor's sandbox is not open")
        job = JobMessage.from_json(job_json)
        with log_context(job_id=job.job_id, batch_id=job.batch_id, worker=self.name):
            if job.validation is not None:  # execgym validate --broker ray: the task's checks
                found = await validation_result(
                    job, scoring.sandbox, worker=self.name, attempt=attempt
                )
                return found.to_json()
            if job.rollout.task_id != job.task.task_id:
                item = RolloutLine(job.index, job.rollout)
                scored = score_unusable(item, isolation=scoring.sandbox.name)
            elif self.board is None:
                scored = await score_rollout(
                    scoring,
                    job.task,
                    job.rollout,
                    index=job.index,
                    limits=job.limits,
                    calibrator=job.calibration.calibrator() if job.calibration else None,
                )
            else:
                scored = await score_shared(
                    scoring,
                    _RayBoard(self.board),
                    self.type_of,
                    job.task,
                    job.rollout,
                    index=job.index,
                    limits=job.limits,
                    calibrator=job.calibration.calibrator() if job.calibration else None,
                )
        return ResultMessage.of(job, scored, worker=self.name, attempt=attempt).to_json()

    async def close(self) -> None:
        """Stop the sandbox (its warm pool) and the sandboxes of tasks' environments."""
        if self._scoring is not None:
            scoring, self._scoring = self._scoring, None
            await scoring.aclose()
            await scoring.sandbox.aclose()
        if self._env_base is not None:
            base, self._env_base = self._env_base, None
            await base.aclose()
