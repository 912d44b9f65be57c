"""TRL ``GRPOTrainer`` reward functions.

::

    from execgym.integrations.trl import make_reward
    trainer = GRPOTrainer(..., reward_funcs=[make_reward("binary")])

TRL calls ``reward(prompts=..., completions=..., completion_ids=..., **columns)``, where
completions are strings or conversations (``[{"role": "assistant", "content": ...}]``)
and every other data set column arrives as a keyword argument holding one value per
sample. The tests come from the first of these columns present:

- ``verification_info`` (open-r1) or ``ground_truth`` (verl style, any shape of
  :mod:`execgym.integrations.ground_truth`);
- ``test`` + ``entry_point``: Hugging Face's ``openai_humaneval`` (``test`` defines
  ``check(candidate)``);
- ``test_list`` (+ ``test_setup_code`` / ``test_imports``, ``challenge_test_list``):
  Hugging Face's ``mbpp`` (full or sanitized);
- ``tests`` + ``entry_point``: an execgym task.

The code before the completion (HumanEval's signature and imports) is the
``task_prompt`` column when the data set has one, else the sample's prompt when it is
Python source (a string, or a conversation whose last user turn is), else nothing.
The function returns one float per completion, ``None`` where the sample is masked (our
failure, or no tests for the sample), which TRL leaves out; never 0.0 for an
infrastructure failure.
"""

from __future__ import annotations

import ast
import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from execgym.integrations.client import RewardClient, SampleScore, shared_client

RewardFn = Callable[..., list[float | None]]
AsyncRewardFn = Callable[..., Awaitable[list[float | None]]]


def _column(kwargs: dict[str, Any], name: str, i: int) -> Any:
    values = kwargs.get(name)
    return values[i] if isinstance(values, list | tuple) and i < len(values) else None


_ROW_COLUMNS = (
    "task_id",
    "test",
    "tests",
    "entry_point",
    "test_list",
    "test_setup_code",
    "test_imports",
    "challenge_test_list",
)


def _python_source(text: Any) -> str:
    if not isinstance(text, str):
        return ""
    try:  # parsed as text, never run here
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return ""
    code = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)
    return text if any(isinstance(node, code) for node in tree.body) else ""


def code_prompt(prompt: Any) -> str:
    """The code before a completion, from TRL's ``prompts[i]``.

    The prompt itself when it is Python source that defines or imports something
    (HumanEval's imports, signature and docstring), or a conversation's last user turn
    when that is; else ``""`` (prose is never put before the code).
    """
    if isinstance(prompt, list):
        turns = [m for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        return _python_source(turns[-1].get("content")) if turns else ""
    return _python_source(prompt)


async def _one(
    client: RewardClient, prompt: Any, completion: Any, kwargs: dict[str, Any], i: int
) -> SampleScore:
    for name in ("verification_info", "ground_truth"):
        value = _column(kwargs, name, i)
        if value is not None:
            return await client.score(completion, value)
    row = {name: v for name in _ROW_COLUMNS if (v := _column(kwargs, name, i)) is not None}
    has_tests = "test_list" in row or (("test" in row or "tests" in row) and "entry_point" in row)
    if not has_tests:
        return SampleScore(
            None,
            "invalid",
            "no tests for this sample: the data set needs a verification_info, "
            "ground_truth, test + entry_point (HumanEval), test_list (MBPP), or "
            "tests + entry_point column",
        )
    row["task_id"] = str(row.get("task_id") or f"trl/{i}")
    row["prompt"] = str(_column(kwargs, "task_prompt", i) or code_prompt(prompt))
    return await client.score(completion, row, task_id=row["task_id"])


async def score_batch(
    client: RewardClient, completions: list[Any], kwargs: dict[str, Any]
) -> list[float | None]:
    """Rewards for a TRL batch (``None`` where masked)."""
    prompts = list(kwargs.pop("prompts", None) or [None] * len(completions))
    prompts += [None] * (len(completions) - len(prompts))
    scores = await asyncio.gather(
        *(_one(client, prompts[i], c, kwargs, i) for i, c in enumerate(completions))
    )
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
        return loop.run(score_batch(client, list(completions), {**kwargs, "prompts": prompts}))

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
        return await loop.run_async(
            score_batch(client, list(completions), {**kwargs, "prompts": prompts})
        )

    execgym_reward.__name__ = execgym_reward.__qualname__ = f"execgym_{client.spec.name}"
    return execgym_reward
