"""OpenEnv-style ``POST /reset`` and ``POST /step`` over the service's episodes.

The request and response shapes are those of OpenEnv's HTTP environment server
(``src/openenv/core/env_server/types.py`` and ``http_server.py`` in meta-pytorch/OpenEnv:
``ResetRequest {seed, episode_id, ...extra}``, ``StepRequest {action, timeout_s,
request_id, ...extra}``, both answered ``{observation, reward, done, metadata}``).
OpenEnv's own HTTP routes build a fresh environment per request (state lives in its
WebSocket sessions); here an episode lives across requests, named by ``episode_id``:

- ``POST /reset`` ``{"task_id": "...", "episode_id": "optional"}`` (or ``"task": {...}``)
  opens an episode (closing one of that id first) and answers its first observation,
  with the id in ``observation.episode_id`` and ``metadata.episode_id`` and the tool
  schemas in ``metadata.tools``;
- ``POST /step`` ``{"action": {"tool": ..., "arguments": {...}}, "episode_id": "..."}``
  answers ``{observation, reward, done, metadata: {terminated, truncated, info}}``;
  ``done`` is ``terminated or truncated``, and the episode's sandbox is freed then;
- ``GET /state?episode_id=...`` answers OpenEnv's ``State``: ``{episode_id, step_count}``.

These routes are part of ``execgym serve`` (same bearer token, same episode cap and
idle reclaim as ``/v1/episodes``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request, status
from pydantic import BaseModel, ConfigDict, Field

from execgym.errors import EpisodeNotFound, EpisodeOver
from execgym.server.episode_routes import action_of, backend_of
from execgym.server.routes import ERRORS, require_token


class ResetRequest(BaseModel):
    """OpenEnv's ``ResetRequest``, with the task to play as extra fields."""

    model_config = ConfigDict(extra="allow")
    seed: int | None = Field(None, ge=0, description="accepted; episodes are deterministic")
    episode_id: str | None = Field(None, max_length=255)
    task_id: str | None = None
    task: dict[str, Any] | None = None


class StepRequest(BaseModel):
    """OpenEnv's ``StepRequest``, with the episode it acts on."""

    model_config = ConfigDict(extra="allow")
    action: dict[str, Any]
    episode_id: str | None = Field(None, max_length=255)
    timeout_s: float | None = Field(None, gt=0)
    request_id: str | None = Field(None, max_length=255)


class EnvResponse(BaseModel):
    """OpenEnv's ``ResetResponse`` / ``StepResponse``."""

    model_config = ConfigDict(extra="forbid")
    observation: dict[str, Any]
    reward: float | None = None
    done: bool = False
    metadata: dict[str, Any] | None = None


openenv = APIRouter(tags=["openenv"], dependencies=[Depends(require_token)], responses=ERRORS)  # type: ignore[arg-type]


@openenv.post("/reset")
async def reset(body: ResetRequest, request: Request) -> EnvResponse:
    """Open an episode (OpenEnv's ``reset``); its id comes back in the observation."""
    backend = backend_of(request)
    task = backend.resolve(body.task_id, body.task)
    episode_id, observation = await backend.registry.open(task, episode_id=body.episode_id)
    return EnvResponse(
        observation={**observation, "episode_id": episode_id},
        reward=None,
        done=False,
        metadata={"episode_id": episode_id, "tools": backend.tools()},
    )


@openenv.post("/step", responses={404: {"description": "no such episode"}, 409: {}})
async def step(body: StepRequest, request: Request) -> EnvResponse:
    """Run one action in the episode ``episode_id`` (OpenEnv's ``step``)."""
    if body.episode_id is None:
        raise HTTPException(
            422,
            'give "episode_id": the one /reset answered (observation.episode_id)',
        )
    try:
        outcome = await backend_of(request).registry.step(
            body.episode_id, action_of(body.action), request_id=body.request_id or None
        )
    except EpisodeNotFound as error:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(error)) from error
    except EpisodeOver as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from error
    return EnvResponse(
        observation=outcome.observation,
        reward=outcome.reward,
        done=outcome.terminated or outcome.truncated,
        metadata={
            "episode_id": body.episode_id,
            "terminated": outcome.terminated,
            "truncated": outcome.truncated,
            "info": outcome.info,
        },
    )


@openenv.get("/state", responses={404: {"description": "no such episode"}})
async def state(episode_id: str, request: Request) -> dict[str, Any]:
    """OpenEnv's ``State`` of an episode: ``{episode_id, step_count}`` and its outcome."""
    try:
        view = await backend_of(request).registry.get_view(episode_id)
    except EpisodeNotFound as error:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(error)) from error
    return {
        "episode_id": view.episode_id,
        "step_count": view.steps,
        "done": view.state == "finished",
        "reward": view.reward,
    }
