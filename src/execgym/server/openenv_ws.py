"""OpenEnv's WebSocket protocol (``/ws``) and its ``/health``, ``/schema``, ``/metadata``.

OpenEnv's clients (``EnvClient`` and ``GenericEnvClient`` in ``openenv.core``, package
``openenv-core`` 0.3.0; ``src/openenv/core/env_client.py`` and
``env_server/http_server.py`` in meta-pytorch/OpenEnv at commit
685de411e5f77286b0fd94798d42c4467cf8a1bc) connect to ``<base_url>/ws`` and keep one
environment session per connection. Each message is JSON text:

- the client sends ``{"type": "reset", "data": {...kwargs}}``, ``{"type": "step",
  "data": action}``, ``{"type": "state"}`` or ``{"type": "close"}``;
- the server answers ``{"type": "observation", "data": {"observation", "reward",
  "done"}}`` (``serialize_observation``), ``{"type": "state", "data": {"episode_id",
  "step_count", ...}}``, or ``{"type": "error", "data": {"message", "code"}}`` with
  OpenEnv's ``WSErrorCode`` (``INVALID_JSON``, ``UNKNOWN_TYPE``, ``VALIDATION_ERROR``,
  ``EXECUTION_ERROR``, ``CAPACITY_REACHED``, ``SESSION_ERROR``), after which the
  connection stays open (except at capacity, as there).

Here a session is an execgym agent episode: ``reset``'s data names the task
(``{"task_id": ...}`` or ``{"task": {...}}``, optionally ``episode_id``; ``seed`` is
accepted and ignored: episodes are deterministic) and closes the connection's previous
episode; ``step``'s data is the action ``{"tool": ..., "arguments": {...}}``. The
episode is closed, and its sandbox freed, when the connection closes. The reset
observation carries ``episode_id`` and the tool schemas (``tools``); a step's answer
adds ``metadata`` (``terminated``, ``truncated``, ``info``) beside OpenEnv's three keys.

With a token configured, the WebSocket handshake must carry ``Authorization: Bearer
<token>`` (refused with close code 1008 otherwise); OpenEnv's ``EnvClient`` sends no
headers, so use it against a server without a token, or behind a proxy that adds it.
``/health`` answers without a token, as ``/healthz`` does.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
from typing import Any

from fastapi import APIRouter, Depends, Request, WebSocket, WebSocketDisconnect, status

from execgym._version import __version__
from execgym.errors import EpisodeError, Error, TaskError
from execgym.server.episode_routes import EpisodeBackend, action_of
from execgym.server.routes import ERRORS, require_token

log = logging.getLogger(__name__)

openenv_public = APIRouter(tags=["openenv"])
openenv_info = APIRouter(tags=["openenv"], dependencies=[Depends(require_token)], responses=ERRORS)  # type: ignore[arg-type]

STATE_SCHEMA = {
    "title": "State",
    "type": "object",
    "additionalProperties": True,
    "properties": {
        "episode_id": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        "step_count": {"type": "integer", "minimum": 0, "default": 0},
        "done": {"type": "boolean"},
        "reward": {"anyOf": [{"type": "number"}, {"type": "null"}]},
    },
}
"""OpenEnv's ``State`` (``episode_id``, ``step_count``; extra fields allowed), as ours."""

OBSERVATION_SCHEMA = {
    "title": "Observation",
    "type": "object",
    "additionalProperties": True,
    "properties": {
        "tool": {"type": "string", "description": "the tool the step ran"},
        "ok": {"type": "boolean", "description": "whether the tool succeeded"},
        "output": {"type": "string", "description": "what the tool printed or returned"},
        "episode_id": {"type": "string", "description": "on reset: the episode's id"},
    },
}


def _backend(app: Any) -> EpisodeBackend:
    return app.state.episodes  # type: ignore[no-any-return]


@openenv_public.get("/health")
async def health() -> dict[str, str]:
    """OpenEnv's ``HealthResponse``: ``{"status": "healthy"}`` while the process answers."""
    return {"status": "healthy"}


@openenv_info.get("/schema")
async def schema(request: Request) -> dict[str, Any]:
    """OpenEnv's ``SchemaResponse``: JSON schemas of the action, observation and state.

    The action is one tool call, ``{"tool": <name>, "arguments": {...}}``; its
    ``oneOf`` holds each tool's arguments schema (the tools of ``GET /metadata``).
    """
    tools = _backend(request.app).tools()
    variants = [
        {
            "type": "object",
            "title": tool["function"]["name"],
            "description": tool["function"].get("description", ""),
            "properties": {
                "tool": {"const": tool["function"]["name"]},
                "arguments": tool["function"].get("parameters", {"type": "object"}),
            },
            "required": ["tool"],
        }
        for tool in tools
    ]
    action = {"title": "Action", "oneOf": variants} if variants else {"type": "object"}
    return {"action": action, "observation": OBSERVATION_SCHEMA, "state": STATE_SCHEMA}


@openenv_info.get("/metadata")
async def metadata(request: Request) -> dict[str, Any]:
    """OpenEnv's ``EnvironmentMetadata``: name, description, version, and more.

    Besides OpenEnv's fields: the task ids a ``reset`` may name (``task_ids``) and the
    tools (``tools``, OpenAI's function-calling format).
    """
    backend = _backend(request.app)
    ids = getattr(backend.catalog, "ids", None)
    return {
        "name": "execgym",
        "description": "Agent episodes on code repositories in isolated sandboxes: reset "
        'with {"task_id": ...}, then step with {"tool": ..., "arguments": {...}}; the '
        "reward arrives when the episode ends (submit, or a budget runs out).",
        "readme_content": None,
        "version": __version__,
        "author": None,
        "documentation_url": None,
        "task_ids": sorted(ids()) if callable(ids) else None,
        "tools": backend.tools(),
    }


def _error(code: str, message: str, **extra: Any) -> str:
    return json.dumps({"type": "error", "data": {"message": message, "code": code, **extra}})


def _authorised(websocket: WebSocket) -> bool:
    token = websocket.app.state.service.settings.token
    if token is None:
        return True
    given = websocket.headers.get("authorization", "")
    scheme, _, credentials = given.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        credentials.strip().encode(), token.encode()
    )


class _Session:
    """One connection's episode: what ``reset``, ``step`` and ``state`` act on."""

    def __init__(self, backend: EpisodeBackend) -> None:
        self.backend = backend
        self.episode_id: str | None = None

    async def handle(self, kind: str, data: dict[str, Any]) -> dict[str, Any]:
        registry = self.backend.registry
        if kind == "reset":
            task = self.backend.resolve(data.get("task_id"), data.get("task"))
            await self.close()
            episode_id = data.get("episode_id")
            if episode_id is not None and not isinstance(episode_id, str):
                raise TaskError('"episode_id" must be a string')
            self.episode_id, observation = await registry.open(task, episode_id=episode_id)
            return {
                "type": "observation",
                "data": {
                    "observation": {
                        **observation,
                        "episode_id": self.episode_id,
                        "tools": self.backend.tools(),
                    },
                    "reward": None,
                    "done": False,
                },
            }
        if kind == "step":
            if self.episode_id is None:
                raise TaskError('no episode yet: send {"type": "reset", "data": {"task_id": ...}}')
            outcome = await registry.step(self.episode_id, action_of(data))
            return {
                "type": "observation",
                "data": {
                    "observation": outcome.observation,
                    "reward": outcome.reward,
                    "done": outcome.terminated or outcome.truncated,
                    "metadata": {
                        "episode_id": self.episode_id,
                        "terminated": outcome.terminated,
                        "truncated": outcome.truncated,
                        "info": outcome.info,
                    },
                },
            }
        if self.episode_id is None:
            return {"type": "state", "data": {"episode_id": None, "step_count": 0}}
        view = await registry.get_view(self.episode_id)
        return {
            "type": "state",
            "data": {
                "episode_id": view.episode_id,
                "step_count": view.steps,
                "done": view.state == "finished",
                "reward": view.reward,
            },
        }

    async def close(self) -> None:
        """Close this connection's episode, if any (one already reclaimed is fine)."""
        if self.episode_id is not None:
            episode_id, self.episode_id = self.episode_id, None
            # EpisodeError: reclaimed idle, or closed by DELETE /v1/episodes/{id}
            with contextlib.suppress(EpisodeError):
                await self.backend.registry.close(episode_id)


@openenv_public.websocket("/ws")
async def websocket_session(websocket: WebSocket) -> None:
    """OpenEnv's persistent session: one episode per connection (see the module doc)."""
    if not _authorised(websocket):
        await websocket.close(code=status.WS_1008_POLICY_VIOLATION, reason="bearer token")
        return
    await websocket.accept()
    session = _Session(_backend(websocket.app))
    try:
        while True:
            raw = await websocket.receive_text()
            try:
                message = json.loads(raw)
            except json.JSONDecodeError as error:
                await websocket.send_text(_error("INVALID_JSON", f"Invalid JSON: {error}"))
                continue
            kind = message.get("type") if isinstance(message, dict) else None
            data = message.get("data", {}) if isinstance(message, dict) else None
            if kind == "close":
                break
            if kind not in ("reset", "step", "state"):
                await websocket.send_text(
                    _error(
                        "UNKNOWN_TYPE",
                        f"Unknown message type: {kind}; known: reset, step, state, close",
                    )
                )
                continue
            if not isinstance(data, dict):
                await websocket.send_text(
                    _error("VALIDATION_ERROR", '"data" must be a JSON object')
                )
                continue
            try:
                answer = await session.handle(kind, data)
            except TaskError as error:
                await websocket.send_text(_error("VALIDATION_ERROR", str(error)))
                continue
            except Error as error:
                retry = getattr(error, "retry_after_s", None)
                if retry is not None:
                    await websocket.send_text(
                        _error("CAPACITY_REACHED", str(error), retry_after_s=retry)
                    )
                    break
                await websocket.send_text(_error("EXECUTION_ERROR", str(error)))
                continue
            await websocket.send_text(json.dumps(answer))
    except WebSocketDisconnect:
        pass
    except Exception as error:  # ours: say so, then close; the log has the details
        log.exception("openenv websocket session failed")
        with contextlib.suppress(RuntimeError, WebSocketDisconnect):
            await websocket.send_text(_error("SESSION_ERROR", str(error)))
    finally:
        await session.close()
        with contextlib.suppress(RuntimeError):  # already closed by the client
            await websocket.close()
