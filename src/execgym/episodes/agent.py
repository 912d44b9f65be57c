"""A deterministic agent that replays a fixed list of actions, and episode results.

:class:`ScriptedAgent` plays recorded or hand-written tool calls (no model): it is
how the tests, the batch runner and the benchmarks drive episodes. When its actions
run out before the episode ends it submits. :meth:`ScriptedAgent.for_example` gives
the shipped solution of an example task (``data/episodes/solutions.jsonl``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from execgym.episodes.env import AsyncEnv
from execgym.episodes.sync import Env
from execgym.episodes.task import examples_dir
from execgym.errors import TaskNotFound

SUBMIT: dict[str, Any] = {"tool": "submit", "arguments": {}}
"""The action that ends an episode."""


@dataclass(frozen=True, slots=True)
class EpisodeResult:
    """How one episode went.

    Attributes:
        task_id: The task.
        reward: The final reward (``None``: the grading failed on our side, masked).
        fraction: Hidden tests passed / hidden tests.
        verdict: The grade's verdict (``passed``, ``failed``, ...).
        terminated: Ended by ``submit``.
        truncated: Ended by the step or time budget (or a lost session).
        steps: Tool calls made.
        wall_time_s: Seconds from ``reset`` to the end, grading included.
        step_times_s: Each step's seconds, by tool name.
        observations: Every observation, the first (``reset``'s) included.
        info: The last step's ``info`` (the grade).
    """

    task_id: str
    reward: float | None
    fraction: float
    verdict: str
    terminated: bool
    truncated: bool
    steps: int
    wall_time_s: float
    step_times_s: tuple[tuple[str, float], ...] = ()
    observations: tuple[dict[str, Any], ...] = field(default=(), repr=False)
    info: dict[str, Any] = field(default_factory=dict, repr=False)

    def to_json(self) -> dict[str, Any]:
        """The result as a ``results.jsonl`` line (without the observations)."""
        return {
            "task_id": self.task_id,
            "reward": self.reward,
            "fraction": self.fraction,
            "verdict": self.verdict,
            "terminated": self.terminated,
            "truncated": self.truncated,
            "steps": self.steps,
            "wall_time_s": round(self.wall_time_s, 4),
            "tests": self.info.get("tests", {}),
            "message": self.info.get("message", ""),
        }


class ScriptedAgent:
    """Plays ``actions`` in order, then submits; see the module docstring.

    Args:
        actions: Tool calls, each in a shape :func:`~execgym.episodes.parse_action`
            accepts (a bad one is played as is: the episode answers ``ok: false``).
    """

    def __init__(self, actions: Sequence[Any]) -> None:
        self.actions = list(actions)
        self._next = 0

    @classmethod
    def for_example(cls, task_id: str) -> ScriptedAgent:
        """The shipped solution of the example task ``task_id``.

        Raises:
            TaskNotFound: if no solution is shipped for it.
        """
        path = examples_dir() / "solutions.jsonl"
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line) if line.strip() else {}
            if record.get("task") == task_id:
                return cls(record["actions"])
        raise TaskNotFound(f"no shipped solution for {task_id!r} in {path}")

    def act(self, observation: dict[str, Any]) -> Any:
        """The next action (``submit`` once the script is played)."""
        if self._next >= len(self.actions):
            return SUBMIT
        self._next += 1
        return self.actions[self._next - 1]

    async def arun(self, env: AsyncEnv) -> EpisodeResult:
        """Play one whole episode in ``env`` (reset first); the env stays open.

        Raises:
            TaskError, SandboxError: if the episode cannot start (see ``reset``).
        """
        self._next = 0
        started = time.monotonic()
        observation = await env.reset()
        seen = [observation]
        times: list[tuple[str, float]] = []
        reward: float | None = 0.0
        terminated = truncated = False
        info: dict[str, Any] = {}
        while not (terminated or truncated):
            action = self.act(observation)
            before = time.monotonic()
            observation, reward, terminated, truncated, info = await env.step(action)
            times.append((str(observation.get("tool", "?")), time.monotonic() - before))
            seen.append(observation)
        return EpisodeResult(
            task_id=env.task.id,
            reward=reward,
            fraction=float(info.get("fraction", 0.0)),
            verdict=str(info.get("verdict", "")),
            terminated=terminated,
            truncated=truncated,
            steps=env.steps,
            wall_time_s=time.monotonic() - started,
            step_times_s=tuple(times),
            observations=tuple(seen),
            info=info,
        )

    def run(self, env: Env) -> EpisodeResult:
        """:meth:`arun` for the blocking :class:`Env`."""
        return env.run_async(self.arun(env.unwrapped))
