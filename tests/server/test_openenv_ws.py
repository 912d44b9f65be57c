"""OpenEnv's own client against ``execgym serve``: WebSocket ``/ws``, ``/health``,
``/schema``, ``/metadata``.

The client is ``openenv.core.GenericEnvClient`` from ``openenv-core`` 0.3.0 (pinned in
the dev extra), run unchanged over a real socket against the app served by uvicorn in a
thread; the episodes are :class:`execgym.testing.FakeEpisodeEnv` (the protocol is
under test here; real episodes are tested in tests/episodes). The error frames and
the handshake refusal are checked with the ``websockets`` client OpenEnv itself uses.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from importlib.util import find_spec
from typing import Any

import httpx
import pytest
import uvicorn

from execgym.episodes.registry import EpisodeRegistry
from execgym.server import ServerSettings, create_app
from execgym.server.episode_routes import EpisodeBackend
from execgym.testing import FAKE_TOOLS, FakeEpisodeEnv, FakeSandbox, FakeTaskCatalog, fake_result
from tests.conftest import require
from tests.server.conftest import NO_TOOLS

TOOLS = [{"type": "function", "function": {"name": name}} for name in FAKE_TOOLS]
FIX = {
    "tool": "write_file",
    "arguments": {"path": "calc.py", "content": "def add(a, b):\n    return a + b\n"},
}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _serve(token: str | None, built: list[FakeEpisodeEnv]) -> Iterator[str]:
    def build(task: Any) -> FakeEpisodeEnv:
        env = FakeEpisodeEnv(task)
        built.append(env)
        return env

    backend = EpisodeBackend(
        EpisodeRegistry(build, max_episodes=2, idle_timeout_s=60.0),
        FakeTaskCatalog(),
        lambda: TOOLS,
    )
    app = create_app(
        ServerSettings(isolation="none", workers=1, token=token),
        sandbox=FakeSandbox([fake_result()]),
        toolchains=NO_TOOLS,
        episodes_backend=backend,
    )
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(500):
        if server.started:
            break
        threading.Event().wait(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def built() -> list[FakeEpisodeEnv]:
    return []


@pytest.fixture
def base_url(built: list[FakeEpisodeEnv]) -> Iterator[str]:
    require(find_spec("openenv") is not None, "openenv-core (pip install 'execgym[dev]')")
    yield from _serve(None, built)


async def test_openenvs_own_client_plays_an_episode_over_ws(
    base_url: str, built: list[FakeEpisodeEnv]
) -> None:
    from openenv.core import GenericEnvClient

    async with GenericEnvClient(base_url=base_url) as env:
        first = await env.reset(task_id="fake/fix-add", seed=7)
        assert first.done is False
        assert first.reward is None
        assert first.observation["problem_statement"].startswith("add() subtracts")
        assert first.observation["episode_id"]
        assert [t["function"]["name"] for t in first.observation["tools"]] == list(FAKE_TOOLS)
        state = await env.state()
        assert state["episode_id"] == first.observation["episode_id"]
        assert state["step_count"] == 0

        wrote = await env.step(FIX)
        assert (wrote.reward, wrote.done) == (0.0, False)
        assert wrote.observation == {"tool": "write_file", "ok": True, "output": "wrote calc.py"}
        submitted = await env.step({"tool": "submit", "arguments": {}})
        assert (submitted.reward, submitted.done) == (1.0, True)
        state = await env.state()
        assert (state["step_count"], state["done"], state["reward"]) == (2, True, 1.0)

        # a second reset in the same session closes the first episode
        again = await env.reset(task_id="fake/fix-add")
        assert again.observation["episode_id"] != first.observation["episode_id"]
        assert built[0].closed
    assert built[1].closed, "closing the connection closes its episode and frees its sandbox"


async def test_sync_wrapper_and_errors_are_openenvs(base_url: str) -> None:
    from openenv.core import GenericEnvClient

    def play() -> None:
        with GenericEnvClient(base_url=base_url).sync() as env:
            with pytest.raises(RuntimeError, match=r"no episode yet.*VALIDATION_ERROR"):
                env.step(FIX)
            with pytest.raises(RuntimeError, match=r"say which task to play.*VALIDATION_ERROR"):
                env.reset()
            with pytest.raises(RuntimeError, match=r"unknown task_id 'nope'"):
                env.reset(task_id="nope")
            assert env.reset(task_id="fake/fix-add").observation["episode_id"]
            with pytest.raises(RuntimeError, match='"tool"'):
                env.step({"x": 1})

    await asyncio.to_thread(play)


async def test_protocol_errors_use_openenvs_codes(base_url: str) -> None:
    from websockets.asyncio.client import connect

    async with connect(base_url.replace("http", "ws") + "/ws") as ws:
        await ws.send("{not json")
        assert json.loads(await ws.recv())["data"]["code"] == "INVALID_JSON"
        await ws.send(json.dumps({"type": "teleport"}))
        answer = json.loads(await ws.recv())
        assert (answer["type"], answer["data"]["code"]) == ("error", "UNKNOWN_TYPE")
        await ws.send(json.dumps({"type": "step", "data": [1]}))
        assert json.loads(await ws.recv())["data"]["code"] == "VALIDATION_ERROR"
        await ws.send(json.dumps({"type": "state"}))
        assert json.loads(await ws.recv()) == {
            "type": "state",
            "data": {"episode_id": None, "step_count": 0},
        }
        await ws.send(json.dumps({"type": "close"}))


async def test_health_schema_and_metadata(base_url: str) -> None:
    async with httpx.AsyncClient(base_url=base_url) as client:
        assert (await client.get("/health")).json() == {"status": "healthy"}
        schema = (await client.get("/schema")).json()
        assert set(schema) == {"action", "observation", "state"}
        assert [v["properties"]["tool"]["const"] for v in schema["action"]["oneOf"]] == list(
            FAKE_TOOLS
        )
        assert {"episode_id", "step_count"} <= set(schema["state"]["properties"])
        meta = (await client.get("/metadata")).json()
        assert meta["name"] == "execgym"
        assert meta["task_ids"] == ["fake/fix-add"]
        assert {"description", "version", "readme_content", "author"} <= set(meta)


async def test_reset_without_a_task_says_so_not_both(base_url: str) -> None:
    async with httpx.AsyncClient(base_url=base_url) as client:
        empty = await client.post("/reset", json={})
        assert empty.status_code == 422
        assert "say which task to play" in empty.json()["message"]
        assert "not both" not in empty.json()["message"]
        both = await client.post("/reset", json={"task_id": "x", "task": {}})
        assert "not both" in both.json()["message"]


async def test_ws_needs_the_token(built: list[FakeEpisodeEnv]) -> None:
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus

    for url in _serve("s3cret", built):
        ws_url = url.replace("http", "ws") + "/ws"
        with pytest.raises(InvalidStatus):
            async with connect(ws_url):
                pass
        headers = {"Authorization": "Bearer s3cret"}
        async with connect(ws_url, additional_headers=headers) as ws:
            await ws.send(json.dumps({"type": "reset", "data": {"task_id": "fake/fix-add"}}))
            assert json.loads(await ws.recv())["type"] == "observation"
        async with httpx.AsyncClient(base_url=url) as client:
            assert (await client.get("/health")).status_code == 200
            assert (await client.get("/metadata")).status_code == 401
