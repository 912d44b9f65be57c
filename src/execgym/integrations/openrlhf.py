"""OpenRLHF: the remote reward server and the custom ``reward_func`` file.

Remote mode (``--remote_rm_url http://host:port/get_reward``): OpenRLHF POSTs
``{"query": [...], "prompts": [...], "labels": [...]}`` (each query is the prompt and
the response, labels the tests of each sample) and reads ``{"rewards": [...],
"scores": [...], "extra_logs": {...}}``. Serve it with::

    uvicorn --factory execgym.integrations.openrlhf:create_app --port 5000

File mode (``--remote_rm_url <path of this file>``): OpenRLHF imports it and calls
``reward_func(queries, prompts, labels)``, taking the same dict (torch tensors when
torch is installed). ``labels`` hold verl-style ground truths (JSON strings) or open-r1
``verification_info``; the response's code is its last fenced block. A masked sample
(our failure) scores 0.0, since OpenRLHF cannot leave one out, and is counted in
``extra_logs["masked"]``. The reward spec comes from ``EXECGYM_REWARD`` (a preset or a
TOML path; default ``binary``), read when the server or file starts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from execgym.integrations._openrlhf_request import RewardRequest
from execgym.integrations.client import RewardClient, SampleScore, shared_client

__all__ = ["RewardRequest", "create_app", "handle", "response_of", "reward_func"]


def response_of(query: str, prompt: str) -> str:
    """The response part of a query (the query is the prompt followed by the response)."""
    return query[len(prompt) :] if prompt and query.startswith(prompt) else query


def _payload(scores: list[SampleScore]) -> dict[str, Any]:
    rewards = [0.0 if s.reward is None else float(s.reward) for s in scores]
    count = max(1, len(scores))
    return {
        "rewards": rewards,
        "scores": rewards,
        "extra_logs": {
            "pass_rate": sum(s.verdict == "passed" for s in scores) / count,
            "masked": float(sum(s.masked for s in scores)),
            "tampered": float(sum(s.verdict == "tampered" for s in scores)),
        },
    }


async def handle(request: RewardRequest, client: RewardClient) -> dict[str, Any]:
    """The answer to one OpenRLHF request."""
    prompts = request.prompts or [""] * len(request.query)
    labels = request.labels or [None] * len(request.query)
    items = []
    for query, prompt, label in zip(request.query, prompts, labels, strict=True):
        items.append((response_of(query, prompt), label if label is not None else {}))
    return _payload(await client.score_many(items))


def _reward_name(environ: Mapping[str, str]) -> str:
    return environ.get("EXECGYM_REWARD", "binary")


def create_app(client: RewardClient | None = None, environ: Mapping[str, str] = os.environ) -> Any:
    """The FastAPI app serving ``POST /get_reward`` (and ``/``) for OpenRLHF.

    Request bodies are guarded as ``execgym serve`` guards them
    (:class:`execgym.server.middleware.BodyLimit`, with the same variables:
    ``EXECGYM_SERVER_MAX_BODY_BYTES``, 64 MiB, then 413;
    ``EXECGYM_SERVER_BODY_IDLE_TIMEOUT_S`` and ``..._MIN_BODY_RATE_BYTES_PER_S``, then
    408), without a token: OpenRLHF's ``remote_rm_url`` client sends none.

    Args:
        client: The client to score with; one from ``EXECGYM_REWARD`` by default.
        environ: Where ``EXECGYM_REWARD`` and the ``EXECGYM_SERVER_*`` body limits are read.

    Raises:
        ConfigError: for an unknown reward or a bad ``EXECGYM_SERVER_*`` value.
    """
    from fastapi import FastAPI

    from execgym.server.middleware import BodyLimit
    from execgym.server.settings import ServerSettings

    settings = ServerSettings.from_env(environ)

    scorer = client or RewardClient(reward=_reward_name(environ))
    app = FastAPI(title="execgym reward server (OpenRLHF)")

    async def get_reward(request: RewardRequest) -> dict[str, Any]:
        return await handle(request, scorer)

    app.post("/get_reward")(get_reward)
    app.post("/")(get_reward)
    app.router.on_shutdown.append(scorer.aclose)
    app.add_middleware(
        BodyLimit,
        max_bytes=settings.max_body_bytes,
        idle_timeout_s=settings.body_idle_timeout_s,
        min_rate_bytes_per_s=settings.min_body_rate_bytes_per_s,
    )
    return app


def reward_func(queries: list[str], prompts: list[str], labels: list[Any], **kwargs: Any) -> Any:
    """OpenRLHF's custom reward function (file mode); see the module docstring."""
    client, loop = shared_client(_reward_name(os.environ))
    request = RewardRequest(query=list(queries), prompts=list(prompts), labels=list(labels))
    result = loop.run(handle(request, client))
    try:
        import torch
    except ImportError:
        return result
    return {
        "rewards": torch.tensor(result["rewards"], dtype=torch.float),
        "scores": torch.tensor(result["scores"], dtype=torch.float),
        "extra_logs": {k: torch.tensor(v) for k, v in result["extra_logs"].items()},
    }
