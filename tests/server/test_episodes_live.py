"""Episodes over HTTP on a real example task, in real bwrap sandboxes.

A scripted agent that fixes the bug gets reward 1 over ``/v1/episodes`` (through
:class:`EpisodeClient`, as a trainer on another machine drives it) and over OpenEnv's
``/reset`` + ``/step``; one that submits without changes gets 0.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from execgym.episodes.task import examples_dir
from execgym.errors import EpisodeNotFound
from execgym.integrations.episode_client import EpisodeClient
from execgym.server import ServerSettings, create_app
from execgym.server.languages import Toolchains
from tests.conftest import require
from tests.episode_scripts import EXAMPLES, PAGER, solution

BASE = "http://execgym"


@asynccontextmanager
async def live_app(toolchains: Toolchains) -> AsyncIterator[httpx.ASGITransport]:
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    settings = ServerSettings(workers=2, warm_pool=False, max_episodes=4, token="t0ken")
    app = create_app(settings, toolchains=toolchains)
    async with app.router.lifespan_context(app):
        yield httpx.ASGITransport(app=app, raise_app_exceptions=False)


@pytest.mark.parametrize("task_id", EXAMPLES)
async def test_the_scripted_solve_over_http_gets_reward_1(
    toolchains: Toolchains, task_id: str
) -> None:
    async with (
        live_app(toolchains) as transport,
        EpisodeClient(BASE, token="t0ken", transport=transport) as client,
    ):
        env = client.env(task_id)
        first = await env.reset()
        assert first["task_id"] == task_id
        assert first["problem_statement"]
        assert {t["function"]["name"] for t in env.tools} >= {"run_command", "submit"}
        actions = solution(task_id)
        steps = [await env.step(action) for action in actions]
        assert all(reward == 0.0 for _, reward, *_ in steps[:-1])  # no reward before the end
        observation, reward, terminated, truncated, info = steps[-1]
        assert (reward, terminated, truncated) == (1.0, True, False), (observation, info)
        state = await client.get(env.episode_id or "")
        assert (state["state"], state["reward"]) == ("finished", 1.0)
        assert state["steps"] == len(actions)
        await env.aclose()
        with pytest.raises(EpisodeNotFound):
            await client.get(state["episode_id"])


async def test_submitting_without_changes_gets_0(toolchains: Toolchains) -> None:
    async with (
        live_app(toolchains) as transport,
        httpx.AsyncClient(
            transport=transport, base_url=BASE, headers={"Authorization": "Bearer t0ken"}
        ) as http,
    ):
        opened = await http.post("/v1/episodes", json={"task_id": PAGER})
        assert opened.status_code == 201, opened.text
        episode = opened.json()["episode_id"]
        done = await http.post(
            f"/v1/episodes/{episode}/step", json={"name": "submit", "arguments": "{}"}
        )
        assert done.status_code == 200, done.text
        assert (done.json()["reward"], done.json()["terminated"]) == (0.0, True)
        assert (await http.delete(f"/v1/episodes/{episode}")).json()["reward"] == 0.0


async def test_openenv_reset_and_step_solve_the_task(toolchains: Toolchains) -> None:
    async with (
        live_app(toolchains) as transport,
        httpx.AsyncClient(
            transport=transport, base_url=BASE, headers={"Authorization": "Bearer t0ken"}
        ) as http,
    ):
        reset = await http.post("/reset", json={"task_id": PAGER, "seed": 0})
        assert reset.status_code == 200, reset.text
        body = reset.json()
        assert (body["reward"], body["done"]) == (None, False)
        episode = body["observation"]["episode_id"]
        assert body["metadata"]["episode_id"] == episode
        for action in solution():
            step = await http.post("/step", json={"action": action, "episode_id": episode})
            assert step.status_code == 200, step.text
        assert (step.json()["reward"], step.json()["done"]) == (1.0, True)
        assert step.json()["metadata"]["terminated"] is True
        state = (await http.get("/state", params={"episode_id": episode})).json()
        assert state == {
            "episode_id": episode,
            "step_count": len(solution()),
            "done": True,
            "reward": 1.0,
        }
        no_id = await http.post("/step", json={"action": {"tool": "submit"}})
        assert no_id.status_code == 422
        assert "episode_id" in no_id.json()["message"]


async def test_an_inline_task_may_only_use_a_snapshot_of_the_task_directories(
    toolchains: Toolchains,
) -> None:
    shipped = examples_dir() / "tasks.jsonl"
    record = json.loads(shipped.read_text().splitlines()[0])
    task = {**record, "id": "mine/pager", "repo": "repos/pager"}
    async with (
        live_app(toolchains) as transport,
        httpx.AsyncClient(
            transport=transport, base_url=BASE, headers={"Authorization": "Bearer t0ken"}
        ) as http,
    ):
        for repo in ("/etc", "file:///root", "repos/../../../../../etc", "/proc/self"):
            refused = await http.post("/v1/episodes", json={"task": {**task, "repo": repo}})
            assert refused.status_code == 422, (repo, refused.text)
            assert "task directories" in refused.json()["message"]
        opened = await http.post("/v1/episodes", json={"task": task})
        assert opened.status_code == 201, opened.text
        assert "pager/core.py" in opened.json()["observation"]["files"]
        bad = await http.post("/v1/episodes", json={"task": {**task, "max_steps": -1}})
        assert bad.status_code == 422
        assert "max_steps" in bad.json()["message"]
