"""verl's custom reward function: ``compute_score`` and ``compute_score_async``.

In verl's config::

    custom_reward_function:
      path: <python -c "import execgym.integrations.verl as m; print(m.__file__)">
      name: compute_score            # or compute_score_async for the async reward loop
      reward_kwargs: {reward: quality, timeout_s: 10}

verl calls it with keyword arguments ``data_source``, ``solution_str``, ``ground_truth``
and ``extra_info`` (plus the ``reward_kwargs``), and takes a float or a dict with a
``score`` key, logging the other keys. ``ground_truth`` is a JSON string or dict:
``{"inputs": [...], "outputs": [...]}`` (stdin/stdout), the same with ``"fn_name"``
(call-based; each input line one JSON argument), or ``{"assert_case": [...]}``; the
code is the completion's last fenced block.

verl cannot leave a sample out, so a masked sample (our failure, unusable ground
truth) scores 0.0 with ``masked = 1.0`` in the dict, for filtering in the logs.
"""

from __future__ import annotations

import logging
from typing import Any

from execgym.integrations.client import RewardClient, SampleScore, shared_client

log = logging.getLogger(__name__)


def _as_verl(result: SampleScore) -> dict[str, Any]:
    if result.masked:
        log.warning("execgym: masked sample scored 0.0 for verl: %s", result.message)
    out: dict[str, Any] = {
        "score": 0.0 if result.reward is None else float(result.reward),
        "acc": 1.0 if result.verdict == "passed" else 0.0,
        "masked": 1.0 if result.masked else 0.0,
        "tampered": 1.0 if result.verdict == "tampered" else 0.0,
        "verdict": result.verdict,
    }
    if result.breakdown:
        for kind, part in result.breakdown["components"].items():
            if part["score"] is not None:
                out[f"reward/{kind}"] = float(part["score"])
    return out


async def _score(
    data_source: str,
    solution_str: str,
    ground_truth: str | dict[str, Any],
    extra_info: dict[str, Any] | None,
    client: RewardClient,
) -> dict[str, Any]:
    index = (extra_info or {}).get("index")
    task_id = f"{data_source}/{index}" if index is not None else None
    return _as_verl(await client.score(solution_str, ground_truth, task_id=task_id))


async def compute_score_async(
    data_source: str,
    solution_str: str,
    ground_truth: str | dict[str, Any],
    extra_info: dict[str, Any] | None = None,
    *,
    reward: str = "binary",
    timeout_s: float = 10.0,
    memory_mb: int = 512,
    **kwargs: Any,
) -> dict[str, Any]:
    """Score one verl sample; see the module docstring.

    Args:
        data_source: The data set's name (kept in the logs only).
        solution_str: The decoded response.
        ground_truth: The tests (JSON string or dict).
        extra_info: verl's per-sample extras; ``extra_info["index"]`` names the task.
        reward: A reward preset or TOML path (``reward_kwargs``).
        timeout_s: Wall-clock and CPU seconds per run.
        memory_mb: Memory per run.
        **kwargs: Other keywords verl passes; ignored.

    Returns:
        ``{"score": float, "acc", "masked", "tampered", "verdict", "reward/<kind>"...}``.
    """
    client, loop = shared_client(reward, timeout_s=timeout_s, memory_mb=memory_mb)
    return await loop.run_async(_score(data_source, solution_str, ground_truth, extra_info, client))


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str | dict[str, Any],
    extra_info: dict[str, Any] | None = None,
    *,
    reward: str = "binary",
    timeout_s: float = 10.0,
    memory_mb: int = 512,
    **kwargs: Any,
) -> dict[str, Any]:
    """Synchronous :func:`compute_score_async` (runs on execgym's background loop)."""
    client, loop = shared_client(reward, timeout_s=timeout_s, memory_mb=memory_mb)
    return loop.run(_score(data_source, solution_str, ground_truth, extra_info, client))
