"""Adapters for RL trainers: verl, TRL, OpenRLHF, and the asyncio client they share.

- :mod:`execgym.integrations.verl`: ``compute_score`` / ``compute_score_async``;
- :mod:`execgym.integrations.trl`: ``make_reward`` / ``make_async_reward`` for
  ``GRPOTrainer``;
- :mod:`execgym.integrations.openrlhf`: the remote reward server (``create_app``) and
  ``reward_func``;
- :class:`RewardClient`: score completions against ground truths from Python.

Ground-truth formats (verl, open-r1 ``verification_info``, execgym tasks):
:mod:`execgym.integrations.ground_truth`.
"""

from __future__ import annotations

from execgym.integrations.client import RewardClient, SampleScore
from execgym.integrations.extract import completion_text, extract_code

__all__ = ["RewardClient", "SampleScore", "completion_text", "extract_code"]
