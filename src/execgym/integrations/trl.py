"""TRL ``GRPOTrainer`` reward functions.

::

    from execgym.integrations.trl import make_reward
    trainer = GRPOTrainer(..., reward_funcs=[make_reward("binary")])

TRL calls ``reward(prompts=..., completions=..., completion_ids=..., **columns)``, where
completions are strings or conversations (``[{"role": "assistant", "content": ...}]``)
and every other data set column arrives as a keyword argument holding one value per
sample. The tests come from the first of these columns present: ``verification_info``
(open-r1), ``ground_truth`` (verl style), or ``tests`` + ``entry_point`` (an execgym /
HumanEval task; its code prompt from ``task_prompt`` when the data set has it). The
function returns one float per completion, ``None`` where the sample is masked (our
failure), which TRL leaves out; never 0.0 for an infrastructure failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from execgym.errors import Error
from execgym.integrations.client import RewardClient, SampleScore, shared_client
from execgym.integrations.extract import completion_text
from execgym.integrations.ground_truth import task_from_record

RewardFn = Callable[..., list[float | None]]
AsyncRewardFn = Callable[..., Awaitable[list[float | None]]]


def _column(kwargs: dict[str, Any], name: str, i: int) -> Any:
    values = kwargs.get(name)
    return values[i] if isinstance(values, list | tuple) and i < len(values) else None


async def _one(
    client: RewardClient, completion: Any, kwargs: dict[str, Any], i: int
) -> SampleScore:
    for name in ("verification_info", "ground_truth"):
        value = _column(kwargs, name, i)
        if value is not None:
            return await client.score(completion, value)
    tests, entry_point = _column(kwargs, "tests", i), _column(kwargs, "entry_point", i)
    if tests is None or entry_point is None:
        return SampleScore(
            None,
            "invalid",
            "no tests for this sample: the data set needs a verification_info, "
            "ground_truth, or tests + entry_point column",
        )
    record = {
        "task_id": str(_column(kwargs, "task_id", i) or f"trl/{i}"),
        "prompt": str(_column(kwargs, "task_prompt", i) or ""),
        "tests": tests,
        "entry_point": entry_point,
    }
    try:
        task = task_from_record(record)
        text = completion_text(completion)
    except (Error, TypeError) as error:
        return SampleScore(None, "invalid", str(error))
    return await client.score_task(task, text)


async def score_batch(
    client: RewardClient, completions: list[Any], kwargs: dict[str, Any]
) -> list[float | None]:
    """Rewards for a TRL batch (``None`` where masked)."""
    scores = await asyncio.gather(*(_one(client, c, kwargs, i) for i, c in enumerate(completions)))
    return [s.reward for s in scores]


def make_reward(
    reward: str = "binary", *, timeout_s: float = 10.0, memory_mb: int = 512
) -> RewardFn:
    """A synchronous TRL reward function (named ``execgym_<reward>`` in TRL's logs).

    Raises:
        ConfigError: for an unknown reward.
    """
    client, loop = shared_client(reward, timeout_s=timeout_s, memory_mb=memory_mb)

    def execgym_reward(
        prompts: list[Any], completions: list[Any], completion_ids: Any = None, **kwargs: Any
    ) -> list[float | None]:
        return loop.run(score_batch(client, list(completions), kwargs))

    execgym_reward.__name__ = execgym_reward.__qualname__ = f"execgym_{client.spec.name}"
    return execgym_reward


def make_async_reward(
    reward: str = "binary", *, timeout_s: float = 10.0, memory_mb: int = 512
) -> AsyncRewardFn:
    """An ``async def`` TRL reward function, awaited on the trainer's own loop.

    Raises:
        ConfigError: for an unknown reward.
    """
    client, loop = shared_client(reward, timeout_s=timeout_s, memory_mb=memory_mb)

    async def execgym_reward(
        prompts: list[Any], completions: list[Any], completion_ids: Any = None, **kwargs: Any
    ) -> list[float | None]:
        return await loop.run_async(score_batch(client, list(completions), kwargs))

    execgym_reward.__name__ = execgym_reward.__qualname__ = f"execgym_{client.spec.name}"
    return execgym_reward
