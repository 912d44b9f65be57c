"""verl's custom reward functions: per sample, per batch, and per episode.

In verl's config (``reward.custom_reward_function`` in verl 0.9; ``custom_reward_function``
at the top level in older releases)::

    custom_reward_function:
      path: <python -c "import execgym.integrations.verl as m; print(m.__file__)">
      name: compute_score            # reward_manager naive / dapo / prime...
      # name: compute_score_async    # the async reward loop
      # name: compute_score_batch    # reward_manager: batch
      # name: compute_episode_score  # multi-turn episodes (verl_tool.EpisodeTool)
      reward_kwargs: {reward: quality, timeout_s: 10}

verl calls ``compute_score`` with keyword arguments ``data_source``, ``solution_str``,
``ground_truth`` and ``extra_info`` (plus the ``reward_kwargs``); its ``batch`` reward
manager (``verl/workers/reward_manager/batch.py``) calls ``compute_score_batch`` once
per batch with ``data_sources``, ``solution_strs``, ``ground_truths`` and
``extra_infos``. ``ground_truth`` takes every shape of
:mod:`execgym.integrations.ground_truth` (verl, APPS/TACO, open-r1, Hugging Face
HumanEval/MBPP columns, execgym task records); the code is extracted from the
completion by :func:`execgym.tasks.extract.extract_code`.

**Every sample returns the same keys** (:func:`score_keys`): verl builds its batch from
the first sample's keys (``np.array([info[key] for info in infos])`` in its agent loop;
``assert len(lst) == len(sample_scores)`` in ``ray_trainer.py``), so a key missing on
one sample crashes the step. The keys:

- ``score``: the reward in [0, 1]; 0.0 for a masked sample (verl cannot leave one out);
- ``acc``: 1.0 if the verdict is ``passed``, else 0.0;
- ``masked``: 1.0 when the sample carries no reward of the model's making (our failure,
  unusable ground truth): filter it out of the logs;
- ``tampered``: 1.0 for a ``tampered`` verdict;
- ``verdict``: the verdict (a string: ``passed``, ``failed``, ``invalid``...);
- ``reward/<component>``, one per component of the reward spec (``reward/correctness``
  for ``binary`` and ``fraction``; ``correctness``, ``static``, ``complexity``,
  ``security``, ``efficiency`` for ``quality``): the component's score in [0, 1], or
  ``None`` when it was not measured (a masked or invalid sample, a task without a
  reference for ``efficiency``). ``None`` is the value verl's own validation metrics
  skip (``process_validation_metrics`` in ``verl/trainer/ppo/metric_utils.py`` drops
  ``None`` values), so an unmeasured component never drags a mean down.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Sequence
from typing import Any

from execgym.integrations.client import RewardClient, SampleScore, shared_client
from execgym.reward import load_spec

log = logging.getLogger(__name__)

BASE_KEYS = ("score", "acc", "masked", "tampered", "verdict")
"""The keys every verl result has, before the ``reward/<component>`` ones."""


@functools.lru_cache(maxsize=64)
def score_keys(reward: str = "binary") -> tuple[str, ...]:
    """The keys of every result of :func:`compute_score` for the reward ``reward``.

    Args:
        reward: A preset name or a TOML path (as in ``reward_kwargs``).

    Returns:
        :data:`BASE_KEYS` then ``reward/<kind>`` for each component kind of the spec,
        in spec order.

    Raises:
        ConfigError: for an unknown reward.

    A TOML spec is read once per process (the result is cached by ``reward``).
    """
    kinds: list[str] = []
    for component in load_spec(reward).components:
        if component.kind not in kinds:
            kinds.append(component.kind)
    return BASE_KEYS + tuple(f"reward/{kind}" for kind in kinds)


def as_verl(result: SampleScore, keys: Sequence[str]) -> dict[str, Any]:
    """A :class:`SampleScore` as verl's result dict, with exactly ``keys``.

    See the module docstring for each key's meaning and its value when not measured.
    """
    if result.masked:
        log.warning("execgym: masked sample scored 0.0 for verl: %s", result.message)
    out: dict[str, Any] = {
        "score": 0.0 if result.reward is None else float(result.reward),
        "acc": 1.0 if result.verdict == "passed" else 0.0,
        "masked": 1.0 if result.masked else 0.0,
        "tampered": 1.0 if result.verdict == "tampered" else 0.0,
        "verdict": result.verdict,
    }
    parts = (result.breakdown or {}).get("components", {})
    for key in keys:
        if key.startswith("reward/"):
            part = parts.get(key.removeprefix("reward/")) or {}
            value = part.get("score")
            out[key] = None if value is None or result.masked else float(value)
    return out


async def _score(
    data_source: Any,
    solution_str: str,
    ground_truth: Any,
    extra_info: Any,
    client: RewardClient,
) -> SampleScore:
    index = extra_info.get("index") if isinstance(extra_info, dict) else None
    task_id = f"{data_source}/{index}" if index is not None else None
    return await client.score(solution_str, ground_truth, task_id=task_id)


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
        A dict with exactly the keys of :func:`score_keys` for ``reward``.
    """
    client, loop = shared_client(reward, timeout_s=timeout_s, memory_mb=memory_mb)
    keys = score_keys(reward)
    result = await loop.run_async(
        _score(data_source, solution_str, ground_truth, extra_info, client)
    )
    return as_verl(result, keys)


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
    keys = score_keys(reward)
    return as_verl(
        loop.run(_score(data_source, solution_str, ground_truth, extra_info, client)), keys
    )


def compute_score_batch(
    data_sources: Sequence[Any],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Any] | None = None,
    *,
    reward: str = "binary",
    timeout_s: float = 10.0,
    memory_mb: int = 512,
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """The function of verl's ``reward_manager=batch``: a whole batch at once.

    verl's ``BatchRewardManager.verify`` (``verl/workers/reward_manager/batch.py``)
    calls it with the batch's ``data_sources``, ``solution_strs``, ``ground_truths``
    and ``extra_infos`` (numpy arrays or lists) plus the ``reward_kwargs``; the samples
    run concurrently in the sandbox.

    Returns:
        One dict per sample, in order, each with exactly the keys of :func:`score_keys`.

    Raises:
        ValueError: if the sequences differ in length (naming each length).
    """
    sources, solutions, truths = list(data_sources), list(solution_strs), list(ground_truths)
    infos = list(extra_infos) if extra_infos is not None else [None] * len(solutions)
    lengths = {len(sources), len(solutions), len(truths), len(infos)}
    if len(lengths) != 1:
        raise ValueError(
            f"compute_score_batch needs one value per sample: {len(sources)} data_sources, "
            f"{len(solutions)} solution_strs, {len(truths)} ground_truths, "
            f"{len(infos)} extra_infos"
        )
    client, loop = shared_client(reward, timeout_s=timeout_s, memory_mb=memory_mb)
    keys = score_keys(reward)

    async def run() -> list[SampleScore]:
        return list(
            await asyncio.gather(
                *(
                    _score(source, solution, truth, info, client)
                    for source, solution, truth, info in zip(
                        sources, solutions, truths, infos, strict=True
                    )
                )
            )
        )

    return [as_verl(result, keys) for result in loop.run(run())]


EPISODE_KEYS = ("score", "acc", "masked", "tampered", "verdict", "tool_calls")
"""The keys of every result of :func:`compute_episode_score`."""


def compute_episode_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any = None,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """The reward of a multi-turn episode played with :class:`~.verl_tool.EpisodeTool`.

    verl's ``ToolAgentLoop`` (``verl/experimental/agent_loop/tool_agent_loop.py``)
    appends the reward each ``tool.execute`` returns to ``agent_data.tool_rewards`` and
    exports it as ``extra_fields["tool_rewards"]``; its reward loop's naive manager
    (``verl/experimental/reward_loop/reward_manager/naive.py``) merges those
    ``tool_extra_fields`` into ``extra_info``. ``EpisodeTool.execute`` returns 0.0 on
    every step but the one that ends the episode, which returns the hidden tests'
    reward, so the episode's reward is ``sum(extra_info["tool_rewards"])``. verl 0.9
    also exports ``agent_data.extra_fields``, where the tool writes
    ``execgym_masked`` (1.0 when the reward is masked: our failure) and
    ``execgym_verdict``; with older verl those two read as not masked and
    ``unknown``.

    Args:
        data_source: As verl passes it; unused.
        solution_str: The trajectory's text; unused (the episode's own hidden tests
            decided the reward).
        ground_truth: Unused, for the same reason.
        extra_info: verl's extras with the agent loop's ``tool_rewards``.
        kwargs: ``reward_kwargs``; ignored.

    Returns:
        ``{"score", "acc", "masked", "tampered", "verdict", "tool_calls"}`` for every
        episode: ``score`` is 0.0 for an episode that never ended (no reward arrived).
    """
    info = extra_info if isinstance(extra_info, dict) else {}
    raw = info.get("tool_rewards")
    calls = [] if raw is None else list(raw)  # a list, or a numpy array
    rewards = [float(r) for r in calls if r is not None]
    masked = bool(info.get("execgym_masked"))
    verdict = str(info.get("execgym_verdict") or ("masked" if masked else "unknown"))
    score = 0.0 if masked else min(1.0, max(0.0, sum(rewards)))
    return {
        "score": score,
        "acc": 1.0 if verdict == "passed" or (verdict == "unknown" and score == 1.0) else 0.0,
        "masked": 1.0 if masked else 0.0,
        "tampered": 1.0 if verdict == "tampered" else 0.0,
        "verdict": verdict,
        "tool_calls": float(len(calls)),
    }
