"""The agent-framework adapters, driven exactly as verl and TRL drive them.

Neither framework is imported (torch, ray, vllm); each test reproduces its calls:

- verl (``verl/tools/utils/tool_registry.py``, ``initialize_tools_from_config``): the
  tool config's entries become ``tool_cls(config=..., tool_schema=
  OpenAIFunctionToolSchema.model_validate(...))``; ``ToolAgentLoop`` hands the models'
  ``tool.tool_schema.model_dump(exclude_unset=True, exclude_none=True)`` to the chat
  template and, per tool call (``_call_tool``): ``json.loads(arguments)``,
  ``instance_id, _ = await tool.create(create_kwargs=...)``, ``await
  tool.execute(instance_id, args, agent_data=agent_data)``, ``await
  tool.release(instance_id)``, reading ``response.text``;
- TRL (``trl/trainer/grpo_trainer.py``): ``environment_factory()`` per rollout slot,
  tools from ``inspect.getmembers(env, inspect.ismethod)`` minus ``reset`` and ``_``
  names, schemas from ``transformers.utils.get_json_schema``, ``env.reset(**row)``,
  tool calls as ``tool_dict[name](**arguments)``, rewards by
  ``reward_func(environments=..., **kwargs)``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import shutil
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from execgym.episodes import tool_schemas
from execgym.integrations.trl_env import episode_environment, episode_reward
from execgym.integrations.verl_tool import EpisodeTool, close_episode_tools, verl_tool_config
from tests.conftest import require
from tests.episode_scripts import PAGER, solution

TOOL_CONFIG = Path(__file__).parents[2] / "deploy" / "verl" / "episode_tools.yaml"


# verl/tools/schemas.py, field for field (verl is not imported here)
class OpenAIFunctionPropertySchema(BaseModel):
    type: str
    description: str | None = None
    enum: list[str] | None = None


class OpenAIFunctionParametersSchema(BaseModel):
    type: str
    properties: dict[str, OpenAIFunctionPropertySchema]
    required: list[str]


class OpenAIFunctionSchema(BaseModel):
    name: str
    description: str
    parameters: OpenAIFunctionParametersSchema
    strict: bool = False


class OpenAIFunctionToolSchema(BaseModel):
    type: str
    function: OpenAIFunctionSchema


def verl_tools(tools_config: dict[str, Any]) -> dict[str, EpisodeTool]:
    """``initialize_tools_from_config``, for native tools."""
    tools = []
    for entry in tools_config["tools"]:
        module_name, class_name = entry["class_name"].rsplit(".", 1)
        tool_cls = getattr(__import__(module_name, fromlist=[class_name]), class_name)
        assert entry["config"]["type"] == "native"
        schema = entry.get("tool_schema")
        tool_schema = OpenAIFunctionToolSchema.model_validate(schema) if schema else None
        tools.append(tool_cls(config=entry["config"], tool_schema=tool_schema))
    return {tool.name: tool for tool in tools}


async def verl_call_tool(
    tools: dict[str, EpisodeTool], name: str, arguments: str, agent_data: Any
) -> tuple[Any, float, dict[str, Any]]:
    """``ToolAgentLoop._call_tool``."""
    tool, instance_id = None, None
    try:
        tool_args = json.loads(arguments)
        tool = tools[name]
        kwargs = agent_data.tools_kwargs.get(name, {})
        instance_id, _ = await tool.create(create_kwargs=kwargs.get("create_kwargs", {}))
        response, reward, metrics = await tool.execute(
            instance_id, tool_args, agent_data=agent_data
        )
    finally:
        if tool and instance_id:
            await tool.release(instance_id)
    return response, reward, metrics


def need_bwrap() -> None:
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")


def test_the_shipped_verl_tool_config_is_current_and_loads_as_verl_loads_it() -> None:
    shipped = yaml.safe_load(TOOL_CONFIG.read_text())
    assert shipped == verl_tool_config(), "regenerate: python -m execgym.integrations.verl_tool"
    tools = verl_tools(shipped)
    assert list(tools) == [s["function"]["name"] for s in tool_schemas()]
    dumped = [
        t.tool_schema.model_dump(exclude_unset=True, exclude_none=True) for t in tools.values()
    ]
    assert dumped[0]["function"]["parameters"]["required"] == ["command"]
    # an entry without tool_schema (verl passes None) names its tool in config
    bare = EpisodeTool({"type": "native", "tool": "write_file"}, None)
    assert bare.name == "write_file"
    assert bare.get_openai_tool_schema().function.parameters["required"] == ["path", "content"]


async def test_verl_tool_calls_solve_an_example_task_with_reward_1() -> None:
    need_bwrap()
    tools = verl_tools(verl_tool_config())
    create = {"create_kwargs": {"task_id": PAGER}}

    def agent_data() -> SimpleNamespace:
        return SimpleNamespace(
            request_id=uuid.uuid4().hex,
            tools_kwargs=dict.fromkeys(tools, create),
            extra_fields={},
        )

    solver, idler = agent_data(), agent_data()
    # verl runs one turn's tool calls concurrently: they share the one episode
    listing, reading = await asyncio.gather(
        verl_call_tool(tools, "list_dir", '{"path": "."}', solver),
        verl_call_tool(tools, "read_file", '{"path": "pager/core.py"}', solver),
    )
    assert [listing[2]["opened_episode"], reading[2]["opened_episode"]].count(True) == 1
    assert "pager" in listing[0].text
    rewards = []
    actions = solution()
    for action in actions:
        arguments = json.dumps(action["arguments"])
        response, reward, metrics = await verl_call_tool(tools, action["tool"], arguments, solver)
        assert isinstance(response.text, str)
        rewards.append(reward)
        if action["tool"] == "read_file":
            assert "def page_count" in response.text
    assert rewards == [0.0] * (len(actions) - 1) + [1.0]
    assert metrics["terminated"] is True
    assert solver.extra_fields["execgym_reward"] == 1.0
    # another trajectory of the same prompt is another episode: submitting at once gives 0
    response, reward, metrics = await verl_call_tool(tools, "submit", "{}", idler)
    assert (reward, metrics["terminated"], idler.extra_fields["execgym_reward"]) == (0.0, True, 0.0)
    # the episode is over: a further call says so rather than starting anew
    response, reward, metrics = await verl_call_tool(tools, "run_tests", "{}", solver)
    assert "episode is over" in response.text
    assert metrics == {"episode_over": True}
    await close_episode_tools()


async def test_verl_instance_mode_keeps_one_episode_per_instance_and_release_closes_it() -> None:
    need_bwrap()
    tools = verl_tools(verl_tool_config())
    tool = tools["run_command"]
    instance_id, response = await tool.create(task_id=PAGER)
    assert response.text == ""
    _first, _, _ = await tool.execute(instance_id, {"command": "echo hi > note.txt"})
    second, _, _ = await tool.execute(instance_id, {"command": "cat note.txt"})
    assert second.text.strip() == "hi"
    assert await tool.calc_reward(instance_id) == 0.0
    await tool.release(instance_id)
    again, _, _ = await tool.execute(instance_id, {"command": "ls"})
    assert "unknown tool instance" in again.text
    with pytest.raises(Exception, match="no task"):
        await tool.create()
    await close_episode_tools()


def trl_tool_dicts(environment: Any) -> dict[str, Any]:
    """The tools TRL takes from one environment instance (``GRPOTrainer.__init__``,
    trl/trainer/grpo_trainer.py at f2cd57710ae345ea6428ae95363267fcf38a3dc8: neither
    ``reset`` nor ``get_reward``, nor ``_`` names)."""
    methods = {}
    has_reset = False
    for name, member in inspect.getmembers(environment, predicate=inspect.ismethod):
        if name == "reset":
            has_reset = True
        elif name != "get_reward" and not name.startswith("_"):
            methods[member.__name__] = member
    assert has_reset
    return methods


def test_trl_sees_exactly_the_episode_tools_with_their_arguments() -> None:
    from transformers.utils import get_json_schema

    environment = episode_environment(task_id=PAGER)()
    tools = trl_tool_dicts(environment)
    expected = {s["function"]["name"]: s["function"] for s in tool_schemas()}
    assert set(tools) == set(expected)  # no get_reward or other helper leaks to the model
    for name, method in tools.items():
        schema = get_json_schema(method)["function"]
        parameters = expected[name]["parameters"]
        assert schema["name"] == name
        assert set(schema["parameters"]["properties"]) == set(parameters["properties"])
        assert set(schema["parameters"].get("required", [])) == set(parameters["required"])
        assert schema["description"] == expected[name]["description"]


def test_trl_environments_solve_an_example_task_and_report_their_rewards() -> None:
    need_bwrap()
    factory = episode_environment()
    environments = [factory() for _ in range(2)]
    row = {"prompt": [{"role": "user", "content": "Fix the bug."}], "task_id": PAGER}
    try:
        for environment in environments:
            first = environment.reset(**row)
            assert "loses the last page" in first
            assert "pager/core.py" in first
        solver, idler = (trl_tool_dicts(e) for e in environments)
        for action in solution():
            # the model's tool call: a name and JSON arguments, parsed by TRL
            result = solver[action["tool"]](**json.loads(json.dumps(action["arguments"])))
            assert isinstance(result, str)
        idler["submit"]()
        assert episode_reward(environments=environments, prompts=[row["prompt"]] * 2) == [1.0, 0.0]
        with pytest.raises(ValueError, match="episode is over"):
            solver["run_tests"]()
        # the next batch: reset starts a fresh episode on the same instance
        environments[0].reset(**row)
        assert (environments[0].reward, environments[0].done) == (0.0, False)
    finally:
        for environment in environments:
            environment._close()


def test_trl_reset_without_a_task_says_how_to_give_one() -> None:
    with pytest.raises(ValueError, match="task_id"):
        episode_environment()().reset(prompt=[])


async def test_both_adapters_play_on_the_http_service(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``base_url`` set: the episodes run on a real ``execgym serve`` over TCP."""
    monkeypatch.setenv("EXECGYM_SERVER_TOKEN", "smoke-token")
    tools = verl_tools(verl_tool_config(base_url=server))
    trajectory = SimpleNamespace(
        request_id=uuid.uuid4().hex,
        tools_kwargs={name: {"create_kwargs": {"task_id": PAGER}} for name in tools},
        extra_fields={},
    )
    for action in solution():
        arguments = json.dumps(action["arguments"])
        _, reward, _ = await verl_call_tool(tools, action["tool"], arguments, trajectory)
    assert (reward, trajectory.extra_fields["execgym_reward"]) == (1.0, 1.0)
    await close_episode_tools()

    environment = episode_environment(base_url=server)()
    try:
        assert "loses the last page" in (environment.reset(task_id=PAGER) or "")
        tools_of_trl = trl_tool_dicts(environment)
        for action in solution():
            tools_of_trl[action["tool"]](**action["arguments"])
        assert episode_reward(environments=[environment]) == [1.0]
    finally:
        environment._close()


async def test_verl_trajectories_beyond_the_episode_cap_wait_for_one_to_end() -> None:
    need_bwrap()
    tools = verl_tools(verl_tool_config(max_episodes=1, max_wait_s=60))

    def trajectory() -> SimpleNamespace:
        kwargs = {name: {"create_kwargs": {"task_id": PAGER}} for name in tools}
        return SimpleNamespace(request_id=uuid.uuid4().hex, tools_kwargs=kwargs, extra_fields={})

    first, second = trajectory(), trajectory()
    await verl_call_tool(tools, "list_dir", "{}", first)
    waiting = asyncio.create_task(verl_call_tool(tools, "list_dir", "{}", second))
    await asyncio.sleep(0.5)
    assert not waiting.done()  # the one episode is taken
    await verl_call_tool(tools, "submit", "{}", first)
    response, _, metrics = await asyncio.wait_for(waiting, 60)
    assert metrics["opened_episode"]
    assert "pager" in response.text
    await close_episode_tools()
