"""Agent episodes over HTTP: ``/v1/episodes`` and its steps, for trainers on other machines.

::

    POST   /v1/episodes              {"task_id": "..."} or {"task": {RepoTask}}
                                     -> 201 {episode_id, observation, tools}
    POST   /v1/episodes/{id}/step    {"tool": ..., "arguments": {...}} (or OpenAI's
                                     {"name", "arguments": "<json>"}, or {"action": ...,
                                     "request_id": "..."}: a step sent again with the
                                     id of the latest step is answered, not run again)
                                     -> {observation, reward, terminated, truncated, info}
    GET    /v1/episodes/{id}         -> its state: steps, last reward, finished or not
    DELETE /v1/episodes/{id}         -> its last state; the sandbox is reclaimed

Same bearer token as every other route. A full registry answers 429 with
``Retry-After``; an unknown (or reclaimed) episode 404; a step after the end 409.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Body, Depends, HTTPException, Request, status
from pydantic import BaseModel, ConfigDict, Field

from execgym.episodes.protocol import TaskCatalog
from execgym.episodes.registry import Episodes, EpisodeView, StepOutcome
from execgym.errors import EpisodeNotFound, EpisodeOver, TaskError
from execgym.server.routes import ERRORS, require_token
from execgym.server.schemas import ErrorResponse


@dataclass
class EpisodeBackend:
    """What the episode routes share.

    Attributes:
        registry: The live episodes.
        catalog: Resolves ``task_id`` and inline tasks.
        tools: The tool schemas handed to clients (OpenAI function-calling format);
            called on each open, so the episode package is only needed when used.
    """

    registry: Episodes
    catalog: TaskCatalog
    tools: Callable[[], list[dict[str, Any]]]

    def resolve(self, task_id: str | None, task: Mapping[str, Any] | None) -> Any:
        """The task a request names.

        Raises:
            TaskError: if it gives both or neither (each with its own message), or an
                invalid inline task.
            TaskNotFound: for an unknown ``task_id``.
        """
        if task_id is not None and task is not None:
            raise TaskError(
                'give either "task_id" (a shipped or configured task) or "task" '
                "(a RepoTask object), not both"
            )
        if task_id is None and task is None:
            raise TaskError(
                'say which task to play: give "task_id" (a shipped or configured task, '
                'e.g. {"task_id": "example/pager-last-page"}; GET /metadata lists them) or "task" '
                "(a RepoTask object)"
            )
        return self.catalog.get(task_id) if task_id is not None else self.catalog.parse(task or {})


class OpenEpisodeRequest(BaseModel):
    """Body of ``POST /v1/episodes``."""

    model_config = ConfigDict(extra="forbid")
    task_id: str | None = Field(None, description="a shipped or configured task's id")
    task: dict[str, Any] | None = Field(None, description="an inline RepoTask")


class OpenEpisodeResponse(BaseModel):
    """A new episode."""

    episode_id: str
    observation: dict[str, Any]
    tools: list[dict[str, Any]]


class StepResponse(BaseModel):
    """One step's result, Gymnasium's five values."""

    observation: dict[str, Any]
    reward: float | None
    terminated: bool
    truncated: bool
    info: dict[str, Any]


def backend_of(request: Request) -> EpisodeBackend:
    """The app's :class:`EpisodeBackend`."""
    return request.app.state.episodes  # type: ignore[no-any-return]


def action_of(body: Mapping[str, Any]) -> dict[str, Any]:
    """The action in a step body: the body itself, its ``action``, or its ``function``.

    Raises:
        TaskError: if none of them names a tool.
    """
    for candidate in (body.get("action"), body.get("function"), body):
        if isinstance(candidate, Mapping) and isinstance(
            candidate.get("tool") or candidate.get("name"), str
        ):
            return dict(candidate)
    raise TaskError(
        'a step body is an action: {"tool": "<name>", "arguments": {...}} or OpenAI\'s '
        '{"name": "<name>", "arguments": "<json>"} (optionally wrapped as {"action": ...})'
    )


def step_response(outcome: StepOutcome) -> StepResponse:
    """The wire form of a step."""
    return StepResponse(
        observation=outcome.observation,
        reward=outcome.reward,
        terminated=outcome.terminated,
        truncated=outcome.truncated,
        info=outcome.info,
    )


def not_found(error: EpisodeNotFound) -> HTTPException:
    """404 for an unknown episode."""
    return HTTPException(status.HTTP_404_NOT_FOUND, str(error))


episodes = APIRouter(
    prefix="/v1/episodes",
    tags=["episodes"],
    dependencies=[Depends(require_token)],
    responses={**ERRORS, 404: {"model": ErrorResponse, "description": "no such episode"}},  # type: ignore[dict-item]
)


@episodes.post("", status_code=status.HTTP_201_CREATED)
async def open_episode(body: OpenEpisodeRequest, request: Request) -> OpenEpisodeResponse:
    """Open an episode on a task: its sandbox, its first observation, its tools."""
    backend = backend_of(request)
    task = backend.resolve(body.task_id, body.task)
    episode_id, observation = await backend.registry.open(task)
    return OpenEpisodeResponse(
        episode_id=episode_id, observation=observation, tools=backend.tools()
    )


@episodes.post("/{episode_id}/step", responses={409: {"model": ErrorResponse}})
async def step_episode(
    episode_id: str,
    request: Request,
    body: dict[str, Any] = Body(..., examples=[{"tool": "list_dir", "arguments": {}}]),  # noqa: B008
) -> StepResponse:
    """Run one tool call in the episode."""
    try:
        request_id = body.get("request_id")
        outcome = await backend_of(request).registry.step(
            episode_id,
            action_of(body),
            request_id=request_id if isinstance(request_id, str) and request_id else None,
        )
    except EpisodeNotFound as error:
        raise not_found(error) from error
    except EpisodeOver as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from error
    return step_response(outcome)


@episodes.get("/{episode_id}")
async def get_episode(episode_id: str, request: Request) -> EpisodeView:
    """An episode's state: steps, last (or final) reward, whether it has ended."""
    try:
        return await backend_of(request).registry.get_view(episode_id)
    except EpisodeNotFound as error:
        raise not_found(error) from error


@episodes.delete("/{episode_id}")
async def delete_episode(episode_id: str, request: Request) -> EpisodeView:
    """Close an episode (its sandbox is reclaimed) and forget it; its last state."""
    try:
        return await backend_of(request).registry.close(episode_id)
    except EpisodeNotFound as error:
        raise not_found(error) from error
