r"""An asyncio client that scores completions against ground truths in a sandbox.

The trainers' adapters (:mod:`~execgym.integrations.verl`,
:mod:`~execgym.integrations.trl`, :mod:`~execgym.integrations.openrlhf`) all go
through it::

    async with RewardClient(reward="quality") as client:
        score = await client.score("```python\\ndef f(x):\\n    return x + 1\\n```",
                                   {"assert_case": ["assert f(1) == 2"]})
        score.reward, score.verdict, score.breakdown

One sandbox (the warm pool by default) serves every call; calls run concurrently up to
``concurrency``. Bad input (ground truth that cannot be read) is an ``invalid`` score
with ``reward=None`` and a message, never an exception, so one bad sample never sinks
a batch.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from execgym.errors import BrokerError, ConfigError, Error
from execgym.integrations.extract import completion_text, extract_code
from execgym.integrations.ground_truth import record_from_ground_truth, task_from_record
from execgym.limits import DEFAULT_LIMITS, Limits
from execgym.ops.breakers import Breakers
from execgym.reward import RewardSpec, load_spec
from execgym.sandbox.base import Sandbox
from execgym.scoring.core import Scoring, score_rollout
from execgym.scoring.results import ScoredRollout
from execgym.sync_bridge import BackgroundLoop
from execgym.tasks.loaders import RolloutLine
from execgym.tasks.models import Rollout, Task

BROKER_ENV = "EXECGYM_BROKER"
"""Where the trainer adapters score when not told: ``ray`` inside a Ray cluster
(sandbox actors on its nodes), ``ray://HOST:PORT``, or unset (in the trainer's process)."""


@dataclass(frozen=True, slots=True)
class SampleScore:
    """The score of one completion.

    Attributes:
        reward: In [0, 1]; ``None`` when masked (our failure or unusable input).
        verdict: ``passed``, ``failed``, ``tampered``, ``sandbox_error``, ``invalid``...
        message: Why, for humans.
        breakdown: The reward's components (``RewardBreakdown.to_json()``), if any.
        diagnostics: Leaks, hot spots and complexity (``Diagnostics.to_json()``, see
            docs/diagnostics.md), when the task or the client asked for them.
    """

    reward: float | None
    verdict: str
    message: str = ""
    breakdown: dict[str, Any] | None = None
    diagnostics: dict[str, Any] | None = None

    @property
    def masked(self) -> bool:
        """Whether the sample carries no reward (leave it out of the loss)."""
        return self.reward is None


class RewardClient:
    """Scores completions in one sandbox; use as an async context manager.

    Args:
        sandbox: Where programs run; a :class:`~execgym.sandbox.WarmPoolSandbox`
            (started on first use, closed with the client) by default.
        limits: Limits of each run.
        reward: A :class:`RewardSpec`, a preset name or a TOML path.
        concurrency: Runs at once (default: CPU count).
        breakers: Circuit breakers per task type (see :mod:`execgym.ops.breakers`): a
            sample of a quarantined type is ``quarantined``, masked (``None``), at once.
        diagnose: Diagnostics for every sample that passes (``("leaks", "hotspots",
            "complexity")``, docs/diagnostics.md); ``None``: each task's ``diagnose``.
        broker: ``"ray"`` (or ``ray://HOST:PORT``): score on sandbox actors of the Ray
            cluster this process runs in (one per node, started on first use, each with
            its warm pool and this client's reward), no service to run; ``None``: the
            ``EXECGYM_BROKER`` environment variable, else here, in ``sandbox``.

    Raises:
        ConfigError: for an unknown reward or a missing tool it needs.
    """

    def __init__(
        self,
        *,
        sandbox: Sandbox | None = None,
        limits: Limits = DEFAULT_LIMITS,
        reward: RewardSpec | str = "binary",
        concurrency: int | None = None,
        breakers: Breakers | None = None,
        diagnose: tuple[str, ...] | None = None,
        broker: str | None = None,
    ) -> None:
        self.breakers = breakers
        self.diagnose = diagnose
        self.spec = reward if isinstance(reward, RewardSpec) else load_spec(reward)
        self.limits = limits
        self._sandbox = sandbox
        self._owns_sandbox = sandbox is None
        self._scoring: Scoring | None = None  # made with the sandbox: its judges are kept
        self._slots = asyncio.Semaphore(max(1, concurrency or os.cpu_count() or 1))
        self._ray = self._ray_broker(broker or os.environ.get(BROKER_ENV) or "embedded")

    def _ray_broker(self, url: str) -> Any:
        """The Ray backend ``url`` names, or ``None`` to score in this process.

        Raises:
            ConfigError: for a URL that is neither ``embedded`` nor Ray's.
        """
        if url in ("embedded", "memory"):
            return None
        if url != "ray" and not url.startswith("ray://"):
            raise ConfigError(
                f"the trainer adapters score here or on Ray, not on broker {url!r} "
                f"(from broker= or ${BROKER_ENV}): use 'ray' (the cluster this process "
                "runs in), ray://HOST:PORT, or 'embedded' / unset to score here"
            )
        from execgym.broker.ray_actors import ActorConfig
        from execgym.broker.ray_broker import RayBroker

        breakers = self.breakers
        config = ActorConfig(
            reward=self.spec,
            diagnose=self.diagnose,
            breaker_key=(breakers.key_name or "dataset") if breakers is not None else "dataset",
        )
        return RayBroker(url, config, breakers=breakers.policy if breakers is not None else None)

    async def __aenter__(self) -> RewardClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.aclose()

    def _box(self) -> Sandbox:
        if self._sandbox is None:
            from execgym.sandbox import open_sandbox

            self._sandbox = open_sandbox("bwrap", warm_pool=True)
        return self._sandbox

    async def aclose(self) -> None:
        """Close the sandbox if the client made it; idempotent."""
        box, self._sandbox, self._scoring = self._sandbox, None, None
        if box is not None and self._owns_sandbox:
            await box.aclose()
        if self._ray is not None:
            await self._ray.aclose()

    async def score_task(self, task: Task, completion: str) -> SampleScore:
        """Score ``completion`` (code, or text with fenced code) against ``task``.

        The scorer reduces ``completion`` to its code with
        :func:`~execgym.tasks.extract.extract_code` for the task's language.
        """
        rollout = Rollout(task_id=task.task_id, completion=completion)
        if self._ray is not None:
            result = await self._on_ray(task, rollout)
        else:
            result = await self._here(task, rollout)
        breakdown = result.reward_breakdown.to_json() if result.reward_breakdown else None
        diagnostics = result.diagnostics.to_json() if result.diagnostics else None
        return SampleScore(
            result.reward, result.verdict.value, result.message, breakdown, diagnostics
        )

    async def _on_ray(self, task: Task, rollout: Rollout) -> ScoredRollout:
        """One sample as one job on the cluster's sandbox actors."""
        from execgym.broker import make_jobs, score_jobs

        jobs, _ = make_jobs({task.task_id: task}, [RolloutLine(0, rollout)], self.limits)
        async for message in score_jobs(self._ray, jobs):
            return message.scored()
        raise BrokerError(f"the Ray backend returned no result for task {task.task_id!r}")

    async def _here(self, task: Task, rollout: Rollout) -> ScoredRollout:
        async with self._slots:
            if self._scoring is None:
                self._scoring = Scoring(
                    self._box(),
                    self.limits,
                    reward=self.spec,
                    breakers=self.breakers,
                    diagnose=self.diagnose,
                )
            return await score_rollout(self._scoring, task, rollout)

    async def score(
        self, completion: Any, ground_truth: str | dict[str, Any], *, task_id: str | None = None
    ) -> SampleScore:
        """Score one completion against a ground truth (see :mod:`.ground_truth`).

        Args:
            completion: A string or a chat conversation (its last assistant turn).
            ground_truth: verl-style JSON (string or dict), open-r1
                ``verification_info``, or an execgym task record.
            task_id: For the logs; derived from the ground truth when absent.

        Returns:
            The score; unusable input is ``invalid`` with ``reward=None``.
        """
        try:
            text = completion_text(completion)
            # The ground truths that read the code to find the entry point (assert_case,
            # MBPP) are Python tasks, whose code the scorer extracts for "python": the
            # entry point comes from the block that is run, not from a sample output.
            code = extract_code(text, "python")
            task = task_from_record(record_from_ground_truth(ground_truth, code, task_id))
        except (Error, TypeError) as error:
            return SampleScore(None, "invalid", str(error))
        return await self.score_task(task, text)

    async def score_many(
        self, items: Iterable[tuple[Any, str | dict[str, Any]]]
    ) -> list[SampleScore]:
        """Score ``(completion, ground_truth)`` pairs concurrently, in order."""
        return list(await asyncio.gather(*(self.score(c, g) for c, g in items)))


_shared: dict[tuple[str, float, int], RewardClient] = {}
_loop: BackgroundLoop | None = None
_lock = threading.Lock()


def shared_client(
    reward: str = "binary", *, timeout_s: float = 10.0, memory_mb: int = 512
) -> tuple[RewardClient, BackgroundLoop]:
    """The process's client for these settings, and the loop it runs on (made once).

    Raises:
        ConfigError: for an unknown reward or bad limits.
    """
    global _loop
    key = (reward, float(timeout_s), int(memory_mb))
    with _lock:
        if _loop is None:
            _loop = BackgroundLoop("execgym-rewards")
        if key not in _shared:
            limits = Limits(
                wall_time_s=timeout_s, cpu_time_s=timeout_s, memory_bytes=memory_mb * 1024 * 1024
            )
            _shared[key] = RewardClient(reward=reward, limits=limits)
        return _shared[key], _loop
