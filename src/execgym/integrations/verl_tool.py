"""Agent episodes as verl multi-turn tools: one ``BaseTool`` per episode tool.

Shaped as verl's ``verl/tools/base_tool.py`` (volcengine/verl): ``__init__(config,
tool_schema)``, ``get_openai_tool_schema()``, ``async create(instance_id=None, **kwargs)
-> (instance_id, ToolResponse)``, ``async execute(instance_id, parameters, **kwargs) ->
(ToolResponse, reward, metrics)``, ``async calc_reward(instance_id, **kwargs) -> float``
and ``async release(instance_id, **kwargs)``; it does not import verl. verl loads it from
a tool config (``actor_rollout_ref.rollout.multi_turn.tool_config_path``), the one
:func:`verl_tool_config` writes (``python -m execgym.integrations.verl_tool``, shipped as
``deploy/verl/episode_tools.yaml``)::

    tools:
      - class_name: execgym.integrations.verl_tool.EpisodeTool
        config: {type: native, base_url: "http://execgym:8080"}   # omit base_url: local
        tool_schema: {type: function, function: {name: run_command, ...}}

and each dataset row names its task in ``extra_info.tools_kwargs.<tool>.create_kwargs``
(``{"task_id": "..."}`` or ``{"task": {RepoTask}}``).

How verl calls it, and how an episode spans the calls: verl's ``ToolAgentLoop._call_tool``
(``verl/experimental/agent_loop/tool_agent_loop.py``) makes, for **every** tool call,
``instance_id, _ = await tool.create(create_kwargs=...)``, then
``await tool.execute(instance_id, args, agent_data=agent_data)``, then
``await tool.release(instance_id)``. The episode is therefore keyed by the trajectory,
``agent_data.request_id``, not by the instance: every tool of the config (all share one
store per process and event loop) acts on the same episode for one trajectory, which
lives until ``submit`` (or the step budget) ends it, or until it is idle for
``idle_timeout_s``. Callers that keep one instance for a whole trajectory (verl's older
SGLang rollout: ``create`` once, ``release`` at the end) pass no ``agent_data``; the
instance is the episode then, and ``release`` closes it.

How the episode's reward reaches verl's reward function: ``execute`` returns 0.0 on
every step but the one that ends the episode, which returns the hidden tests' reward.
``ToolAgentLoop`` appends each returned reward to ``agent_data.tool_rewards`` and
exports it as ``extra_fields["tool_rewards"]`` (beside ``turn_scores``); verl's reward
loop merges those fields into the reward function's ``extra_info``, so
:func:`execgym.integrations.verl.compute_episode_score` (``name:
compute_episode_score`` in ``custom_reward_function``) reads the episode's reward as
``sum(extra_info["tool_rewards"])``. verl 0.9 exports ``agent_data.extra_fields`` too
(the Jan 2026 main branch did not): the step that ends the episode writes
``execgym_reward`` (``None`` when masked), ``execgym_masked`` (1.0 when the reward is
masked: our failure, scored 0.0 by ``execute``) and ``execgym_verdict`` there.
:meth:`EpisodeTool.calc_reward` gives the final reward to callers that ask for it
(verl's ToolAgentLoop does not).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from execgym.episodes.protocol import (
    EpisodeEnv,
    ShippedTasks,
    local_env_factory,
    observation_text,
    tool_schemas,
)
from execgym.episodes.registry import EpisodeRegistry
from execgym.errors import CapacityExceeded, ConfigError, EpisodeNotFound, EpisodeOver

CLASS_NAME = "execgym.integrations.verl_tool.EpisodeTool"


class ToolResponse(BaseModel):
    """verl's ``ToolResponse`` (``verl/tools/schemas.py``): text, image, video.

    verl's own class is returned instead when ``verl.tools.schemas`` is loaded.
    """

    text: str | None = None
    image: Any = None
    video: Any = None


class _Function(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    description: str = ""
    parameters: dict[str, Any]


class ToolSchema(BaseModel):
    """verl's ``OpenAIFunctionToolSchema`` shape (``model_dump`` is what verl reads)."""

    model_config = ConfigDict(extra="allow")
    type: str = "function"
    function: _Function


def _response(text: str) -> Any:
    schemas = sys.modules.get("verl.tools.schemas")
    cls = getattr(schemas, "ToolResponse", None) or ToolResponse
    return cls(text=text)


def _schema_of(name: str) -> Any:
    for schema in tool_schemas():
        if schema["function"]["name"] == name:
            schemas = sys.modules.get("verl.tools.schemas")
            cls = getattr(schemas, "OpenAIFunctionToolSchema", None) or ToolSchema
            return cls.model_validate(schema)
    known = [s["function"]["name"] for s in tool_schemas()]
    raise ConfigError(f"no episode tool {name!r}; the tools are {known}")


@dataclass
class _Instance:
    task: Any
    key: str | None = None


class _Store:
    """The episodes of one process and event loop, shared by every tool of a config."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        base_url = config.get("base_url")
        if base_url:
            from execgym.integrations.episode_client import EpisodeClient

            token = os.environ.get(str(config.get("token_env", "EXECGYM_SERVER_TOKEN")))
            client = EpisodeClient(str(base_url), token=token)
            self._client: Any = client

            def build(task: Any) -> EpisodeEnv:
                if isinstance(task, Mapping):
                    return client.env(task=task)
                return client.env(str(task))
        else:
            self._client = None
            catalog = ShippedTasks(*map(str, config.get("task_paths") or []))
            local = local_env_factory()

            def build(task: Any) -> EpisodeEnv:
                return local(catalog.get(task) if isinstance(task, str) else task)

        self._opening: dict[str, tuple[asyncio.Lock, int]] = {}
        self.max_wait_s = float(config.get("max_wait_s", 600.0))
        self.registry = EpisodeRegistry(
            build,
            max_episodes=int(config.get("max_episodes", 64)),
            idle_timeout_s=float(config.get("idle_timeout_s", 600.0)),
        )

    async def ensure_open(self, key: str, task: Any) -> bool:
        """Open the episode ``key`` unless it exists; whether it was opened now.

        verl runs a turn's tool calls concurrently: only the first opens the episode.
        """
        lock, users = self._opening.get(key, (asyncio.Lock(), 0))
        self._opening[key] = (lock, users + 1)
        try:
            async with lock:
                try:
                    self.registry.get(key)
                    return False
                except EpisodeNotFound:
                    await self._open(key, task)
                    return True
        finally:
            lock, users = self._opening[key]
            if users == 1:
                del self._opening[key]
            else:
                self._opening[key] = (lock, users - 1)

    async def _open(self, key: str, task: Any) -> None:
        deadline = time.monotonic() + self.max_wait_s
        while True:
            try:
                await self.registry.open(task, episode_id=key)
                return
            except CapacityExceeded:  # more trajectories than episodes: poll until one ends
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.5)

    async def aclose(self) -> None:
        await self.registry.aclose()
        if self._client is not None:
            await self._client.aclose()


_stores: dict[tuple[str, int], _Store] = {}


async def close_episode_tools() -> None:
    """Close every episode the tools of this event loop hold (and their connections).

    verl never calls it (its workers end with their process); call it when a loop that
    used the tools goes on to other work.
    """
    loop = id(asyncio.get_running_loop())
    for key in [key for key in _stores if key[1] == loop]:
        await _stores.pop(key).aclose()


def _store(config: Mapping[str, Any]) -> _Store:
    key = (repr(sorted((k, str(v)) for k, v in config.items())), id(asyncio.get_running_loop()))
    if key not in _stores:
        _stores[key] = _Store(config)
    return _stores[key]


class EpisodeTool:
    """One episode tool (``run_command``, ``write_file``, ``submit``...) for verl.

    Args:
        config: The ``config`` of the tool config entry: ``type: native``; optional
            ``base_url`` (episodes on that ``execgym serve``; its token from the
            variable named by ``token_env``, ``EXECGYM_SERVER_TOKEN`` by default;
            in this process when absent), ``task_id`` (when rows give none),
            ``task_paths`` (more ``RepoTask`` files, local mode), ``max_episodes``
            (64: more trajectories wait up to ``max_wait_s``, 600, for one to end),
            ``idle_timeout_s`` (600), and ``tool`` (the tool's name when
            ``tool_schema`` is omitted).
        tool_schema: verl's ``OpenAIFunctionToolSchema`` of this tool; ``None``
            (verl passes ``None`` when the entry has no ``tool_schema``) builds it from
            :func:`execgym.episodes.tool_schemas` and ``config["tool"]``.

    Raises:
        ConfigError: for an unknown tool name.
    """

    def __init__(self, config: dict[str, Any], tool_schema: Any = None) -> None:
        self.config = dict(config or {})
        self.tool_schema = (
            tool_schema if tool_schema is not None else _schema_of(str(self.config.get("tool", "")))
        )
        self.name: str = self.tool_schema.function.name
        self._instances: dict[str, _Instance] = {}
        self._store_config = {
            k: v for k, v in self.config.items() if k not in ("tool", "type", "task_id")
        }

    def get_openai_tool_schema(self) -> Any:
        """This tool's schema (verl's ``OpenAIFunctionToolSchema`` shape)."""
        return self.tool_schema

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, Any]:
        """Register a tool instance for a trajectory's task; nothing starts yet.

        Args:
            instance_id: verl's id for the instance (a new one when ``None``).
            kwargs: ``create_kwargs={"task_id": ...}`` as verl's agent loop passes them
                (or ``task_id=...`` / ``task={...}`` directly).

        Returns:
            ``(instance_id, ToolResponse)`` (empty text).

        Raises:
            ConfigError: if neither the row nor the config names a task.
        """
        spec = kwargs.get("create_kwargs") or kwargs
        task = spec.get("task") or spec.get("task_id") or self.config.get("task_id")
        if not task:
            raise ConfigError(
                "no task for the episode: give create_kwargs {'task_id': ...} in the row's "
                f"extra_info.tools_kwargs.{self.name}, or task_id in the tool's config"
            )
        instance_id = instance_id or uuid.uuid4().hex
        self._instances[instance_id] = _Instance(task)
        return instance_id, _response("")

    def _key(self, instance_id: str, agent_data: Any) -> str:
        request_id = getattr(agent_data, "request_id", None)
        return f"trajectory:{request_id}" if request_id else f"instance:{instance_id}"

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[Any, float, dict[str, Any]]:
        """Run this tool in the trajectory's episode (opened on its first call).

        Args:
            instance_id: From :meth:`create`.
            parameters: The tool call's arguments (already parsed from JSON by verl).
            kwargs: ``agent_data`` (verl's ``AgentData``: ``request_id`` keys the
                episode; ``extra_fields`` gets ``execgym_reward``, ``execgym_masked``
                and ``execgym_verdict`` when the episode ends).

        Returns:
            ``(ToolResponse(text=observation), reward, metrics)``; the reward is 0.0
            until the episode ends.
        """
        instance = self._instances.get(instance_id)
        if instance is None:
            return _response(f"unknown tool instance {instance_id}: call create first"), 0.0, {}
        agent_data = kwargs.get("agent_data")
        instance.key = self._key(instance_id, agent_data)
        store = _store(self._store_config)
        registry = store.registry
        opened = await store.ensure_open(instance.key, instance.task)
        action = {"tool": self.name, "arguments": dict(parameters or {})}
        try:
            outcome = await registry.step(instance.key, action)
        except EpisodeOver as error:
            return _response(f"The episode is over: {error}"), 0.0, {"episode_over": True}
        metrics = {
            "terminated": outcome.terminated,
            "truncated": outcome.truncated,
            "masked": outcome.reward is None,
            "opened_episode": opened,
        }
        if outcome.terminated or outcome.truncated:
            extra = getattr(agent_data, "extra_fields", None)
            if isinstance(extra, dict):
                extra["execgym_reward"] = outcome.reward
                extra["execgym_masked"] = 1.0 if outcome.reward is None else 0.0
                extra["execgym_verdict"] = str(outcome.info.get("verdict") or "")
        text = observation_text(outcome.observation)
        return _response(text), outcome.reward or 0.0, metrics

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """The episode's reward so far: 0.0 until it ends (and when it is masked)."""
        instance = self._instances.get(instance_id)
        if instance is None or instance.key is None:
            return 0.0
        try:
            return _store(self._store_config).registry.get(instance.key).reward or 0.0
        except EpisodeNotFound:
            return 0.0

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """Forget the instance; an episode keyed by the instance itself is closed."""
        instance = self._instances.pop(instance_id, None)
        if instance is not None and instance.key == f"instance:{instance_id}":
            with contextlib.suppress(EpisodeNotFound):
                await _store(self._store_config).registry.close(instance.key)


def verl_tool_config(**config: Any) -> dict[str, Any]:
    """The tool config verl reads (``multi_turn.tool_config_path``), every tool listed.

    Args:
        config: Added to each tool's ``config`` (``base_url``, ``task_id``...).
    """
    return {
        "tools": [
            {
                "class_name": CLASS_NAME,
                "config": {"type": "native", **config},
                "tool_schema": schema,
            }
            for schema in tool_schemas()
        ]
    }


def main() -> None:
    """Print the tool config: ``python -m execgym.integrations.verl_tool > tools.yaml``.

    YAML when PyYAML is installed, else JSON (which is YAML too).
    """
    try:
        import yaml
    except ImportError:
        import json

        sys.stdout.write(json.dumps(verl_tool_config(), indent=2) + "\n")
        return
    sys.stdout.write(yaml.safe_dump(verl_tool_config(), sort_keys=False))


if __name__ == "__main__":
    main()
