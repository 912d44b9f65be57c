"""``/v1/episodes`` and the episode registry, on in-memory episodes (no sandbox).

The full solve over HTTP on real example tasks is in ``test_episodes_live.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from execgym.episodes.registry import EpisodeRegistry
from execgym.errors import CapacityExceeded, EpisodeNotFound, EpisodeOver
from execgym.server import ServerSettings, create_app
from execgym.server.episode_routes import EpisodeBackend
from execgym.testing import FAKE_TOOLS, FakeEpisodeEnv, FakeSandbox, FakeTaskCatalog, fake_result
from tests.server.conftest import NO_TOOLS, serving

TOOLS = [{"type": "function", "function": {"name": name}} for name in FAKE_TOOLS]
SUBMIT = {"tool": "submit", "arguments": {}}
FIX = {
    "tool": "write_file",
    "arguments": {"path": "calc.py", "content": "def add(a, b):\n    return a + b\n"},
}


def fake_backend(
    built: list[FakeEpisodeEnv], step_delay_s: float = 0.0, **registry: Any
) -> EpisodeBackend:
    def build(task: Any) -> FakeEpisodeEnv:
        env = FakeEpisodeEnv(task, step_delay_s=step_delay_s)
        built.append(env)
        return env

    options = {"max_episodes": 4, "idle_timeout_s": 60.0, **registry}
    return EpisodeBackend(EpisodeRegistry(build, **options), FakeTaskCatalog(), lambda: TOOLS)


def app_kwargs(backend: EpisodeBackend, token: str | None = None) -> dict[str, Any]:
    return {
        "settings": ServerSettings(isolation="none", workers=1, token=token),
        "sandbox": FakeSandbox([fake_result()]),
        "toolchains": NO_TOOLS,
        "episodes_backend": backend,
    }


async def test_an_episode_is_opened_stepped_read_and_deleted() -> None:
    built: list[FakeEpisodeEnv] = []
    async with serving(**app_kwargs(fake_backend(built))) as client:
        opened = await client.post("/v1/episodes", json={"task_id": "fake/fix-add"})
        assert opened.status_code == 201, opened.text
        body = opened.json()
        episode = body["episode_id"]
        assert body["observation"]["problem_statement"].startswith("add() subtracts")
        assert [t["function"]["name"] for t in body["tools"]] == list(FAKE_TOOLS)

        step = await client.post(f"/v1/episodes/{episode}/step", json=FIX)
        assert step.status_code == 200, step.text
        assert step.json() == {
            "observation": {"tool": "write_file", "ok": True, "output": "wrote calc.py"},
            "reward": 0.0,
            "terminated": False,
            "truncated": False,
            "info": {"tool": "write_file", "step": 1},
        }
        # OpenAI's tool-call shape, arguments as a JSON string, wrapped as {"action": ...}
        tested = await client.post(
            f"/v1/episodes/{episode}/step",
            json={"action": {"name": "run_tests", "arguments": "{}"}},
        )
        assert tested.json()["observation"]["output"] == "1 passed"
        state = (await client.get(f"/v1/episodes/{episode}")).json()
        assert (state["state"], state["steps"], state["task_id"]) == ("running", 2, "fake/fix-add")

        deleted = await client.delete(f"/v1/episodes/{episode}")
        assert deleted.status_code == 200
        assert deleted.json()["steps"] == 2
        assert built[0].closed
        gone = await client.get(f"/v1/episodes/{episode}")
        assert gone.status_code == 404
        assert "no episode" in gone.json()["message"]
        assert (await client.delete(f"/v1/episodes/{episode}")).status_code == 404


async def test_submit_ends_the_episode_frees_its_sandbox_and_refuses_more_steps() -> None:
    built: list[FakeEpisodeEnv] = []
    async with serving(**app_kwargs(fake_backend(built))) as client:
        solved = (await client.post("/v1/episodes", json={"task_id": "fake/fix-add"})).json()
        lazy = (await client.post("/v1/episodes", json={"task_id": "fake/fix-add"})).json()
        await client.post(f"/v1/episodes/{solved['episode_id']}/step", json=FIX)
        good = await client.post(
            f"/v1/episodes/{solved['episode_id']}/step", json={"tool": "submit"}
        )
        bad = await client.post(f"/v1/episodes/{lazy['episode_id']}/step", json={"tool": "submit"})
        assert (good.json()["reward"], good.json()["terminated"]) == (1.0, True)
        assert (bad.json()["reward"], bad.json()["terminated"]) == (0.0, True)
        assert built[0].closed
        assert built[1].closed
        after = await client.post(f"/v1/episodes/{solved['episode_id']}/step", json=FIX)
        assert after.status_code == 409
        assert "has ended" in after.json()["message"]
        final = (await client.get(f"/v1/episodes/{solved['episode_id']}")).json()
        assert (final["state"], final["reward"]) == ("finished", 1.0)


async def test_bad_requests_say_what_is_wrong() -> None:
    async with serving(**app_kwargs(fake_backend([]))) as client:
        unknown = await client.post("/v1/episodes", json={"task_id": "nope"})
        assert unknown.status_code == 422
        assert "fake/fix-add" in unknown.json()["message"]
        both = await client.post("/v1/episodes", json={"task_id": "x", "task": {}})
        assert both.status_code == 422
        assert "not both" in both.json()["message"]
        inline = await client.post("/v1/episodes", json={"task": {"task_id": "mine", "oops": 1}})
        assert inline.status_code == 422
        assert "oops" in inline.json()["message"]
        episode = (await client.post("/v1/episodes", json={"task": {"task_id": "mine"}})).json()
        no_tool = await client.post(f"/v1/episodes/{episode['episode_id']}/step", json={"x": 1})
        assert no_tool.status_code == 422
        assert '"tool"' in no_tool.json()["message"]
        # a bad action from the model is an observation, not an HTTP error
        wrong = await client.post(
            f"/v1/episodes/{episode['episode_id']}/step", json={"tool": "rm_rf", "arguments": {}}
        )
        assert wrong.status_code == 200
        assert "unknown tool" in wrong.json()["observation"]["output"]
        missing = await client.post("/v1/episodes/deadbeef/step", json={"tool": "submit"})
        assert missing.status_code == 404


async def test_episodes_need_the_token() -> None:
    async with serving(**app_kwargs(fake_backend([]), token="s3cret")) as client:
        refused = await client.post("/v1/episodes", json={"task_id": "fake/fix-add"})
        assert refused.status_code == 401
        headers = {"Authorization": "Bearer s3cret"}
        ok = await client.post("/v1/episodes", json={"task_id": "fake/fix-add"}, headers=headers)
        assert ok.status_code == 201
        episode = ok.json()["episode_id"]
        assert (await client.get(f"/v1/episodes/{episode}")).status_code == 401
        assert (await client.post("/reset", json={"task_id": "fake/fix-add"})).status_code == 401


async def test_a_full_registry_answers_429_with_retry_after_until_one_ends() -> None:
    built: list[FakeEpisodeEnv] = []
    async with serving(**app_kwargs(fake_backend(built, max_episodes=2))) as client:
        ids = [
            (await client.post("/v1/episodes", json={"task_id": "fake/fix-add"})).json()[
                "episode_id"
            ]
            for _ in range(2)
        ]
        full = await client.post("/v1/episodes", json={"task_id": "fake/fix-add"})
        assert full.status_code == 429
        assert 1 <= int(full.headers["Retry-After"]) <= 60
        assert "2 of 2 episodes are live" in full.json()["message"]
        # a finished episode no longer counts: its sandbox is freed at once
        await client.post(f"/v1/episodes/{ids[0]}/step", json={"tool": "submit"})
        assert (
            await client.post("/v1/episodes", json={"task_id": "fake/fix-add"})
        ).status_code == 201
        assert (
            await client.post("/v1/episodes", json={"task_id": "fake/fix-add"})
        ).status_code == 429
        await client.delete(f"/v1/episodes/{ids[1]}")
        assert (
            await client.post("/v1/episodes", json={"task_id": "fake/fix-add"})
        ).status_code == 201


async def test_idle_episodes_are_reclaimed_after_the_timeout() -> None:
    built: list[FakeEpisodeEnv] = []
    async with serving(**app_kwargs(fake_backend(built, idle_timeout_s=0.4))) as client:
        idle = (await client.post("/v1/episodes", json={"task_id": "fake/fix-add"})).json()
        busy = (await client.post("/v1/episodes", json={"task_id": "fake/fix-add"})).json()
        for _ in range(5):  # steps keep an episode alive
            await asyncio.sleep(0.15)
            await client.post(f"/v1/episodes/{busy['episode_id']}/step", json={"tool": "list_dir"})
        assert built[0].closed
        assert not built[1].closed
        gone = await client.post(
            f"/v1/episodes/{idle['episode_id']}/step", json={"tool": "list_dir"}
        )
        assert gone.status_code == 404
        assert "reclaimed" in gone.json()["message"]
        metrics = (await client.get("/metrics")).text
        assert "execgym_episodes_live 1.0" in metrics
        assert "execgym_episodes_reclaimed 1.0" in metrics
        await asyncio.sleep(0.7)
        assert built[1].closed
        assert (await client.get(f"/v1/episodes/{busy['episode_id']}")).status_code == 404


async def test_shutdown_closes_every_episode() -> None:
    built: list[FakeEpisodeEnv] = []
    async with serving(**app_kwargs(fake_backend(built))) as client:
        for _ in range(3):
            await client.post("/v1/episodes", json={"task_id": "fake/fix-add"})
        assert not any(env.closed for env in built)
    assert len(built) == 3
    assert all(env.closed for env in built)


async def test_the_registry_never_reclaims_an_episode_mid_step() -> None:
    now = [0.0]
    registry = EpisodeRegistry(
        lambda task: FakeEpisodeEnv(task, step_delay_s=0.05),
        max_episodes=1,
        idle_timeout_s=1.0,
        clock=lambda: now[0],
    )
    episode, _ = await registry.open(FakeTaskCatalog().get("fake/fix-add"))
    stepping = asyncio.create_task(registry.step(episode, {"tool": "list_dir"}))
    await asyncio.sleep(0.01)
    now[0] = 5.0
    assert await registry.reap() == []
    await stepping
    with pytest.raises(CapacityExceeded) as full:
        await registry.open(FakeTaskCatalog().get("fake/fix-add"))
    assert full.value.retry_after_s == 1
    now[0] = 6.5
    assert await registry.reap() == [episode]
    with pytest.raises(EpisodeNotFound):
        await registry.step(episode, {"tool": "list_dir"})
    await registry.aclose()


async def test_a_step_after_the_end_is_refused_in_the_registry_too() -> None:
    registry = EpisodeRegistry(FakeEpisodeEnv, max_episodes=2, idle_timeout_s=10.0)
    episode, _ = await registry.open(FakeTaskCatalog().get("fake/fix-add"))
    outcome = await registry.step(episode, {"tool": "submit"})
    assert (outcome.reward, outcome.terminated) == (0.0, True)
    with pytest.raises(EpisodeOver, match="has ended"):
        await registry.step(episode, {"tool": "submit"})
    assert registry.live == 0
    assert len(registry) == 1
    await registry.aclose()


async def test_the_client_waits_for_a_place_then_gives_up_after_max_wait() -> None:
    import httpx

    from execgym.integrations.episode_client import EpisodeClient
    from execgym.server import create_app

    app = create_app(**app_kwargs(fake_backend([], max_episodes=1)))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with EpisodeClient("http://x", transport=transport, max_wait_s=0) as impatient:
            first = await impatient.open("fake/fix-add")
            with pytest.raises(CapacityExceeded, match="1 of 1 episodes"):
                await impatient.open("fake/fix-add")
        async with EpisodeClient("http://x", transport=transport, max_wait_s=30) as patient:
            waiting = asyncio.create_task(patient.open("fake/fix-add"))
            await asyncio.sleep(0.3)
            assert not waiting.done()
            await patient.delete(first["episode_id"])
            second = await asyncio.wait_for(waiting, 30)
            assert second["episode_id"] != first["episode_id"]
            with pytest.raises(EpisodeNotFound):
                await patient.step(first["episode_id"], {"tool": "list_dir"})


async def test_status_and_metrics_count_programs_and_episodes() -> None:
    """``/v1/status`` (the /status page's data) and ``/metrics`` see /run_code programs
    and agent episodes, not only /v1/score rollouts."""
    built: list[FakeEpisodeEnv] = []
    async with serving(**app_kwargs(fake_backend(built))) as client:
        ran = await client.post("/run_code", json={"code": "print(1)", "language": "python"})
        assert ran.status_code == 200
        solved = (await client.post("/v1/episodes", json={"task_id": "fake/fix-add"})).json()
        await client.post(f"/v1/episodes/{solved['episode_id']}/step", json=FIX)
        await client.post(f"/v1/episodes/{solved['episode_id']}/step", json={"tool": "submit"})
        failed = (await client.post("/reset", json={"task_id": "fake/fix-add"})).json()
        await client.post(
            "/step", json={"episode_id": failed["metadata"]["episode_id"], "action": SUBMIT}
        )
        await client.post("/v1/episodes", json={"task_id": "fake/fix-add"})  # left open
        status = (await client.get("/v1/status")).json()
        metrics = (await client.get("/metrics")).text
    assert status["programs"]["completed"] == 1
    assert status["programs"]["outcomes"] == {"ok": 1}
    assert status["programs"]["languages"] == {"python": 1}
    assert status["programs"]["throughput_per_s"] > 0
    assert status["episodes"] == {
        "live": 1,
        "opened": 3,
        "steps": 3,
        "finished": 2,
        "terminated": 2,
        "truncated": 0,
        "reclaimed": 0,
        "mean_final_reward": 0.5,
    }
    assert "execgym_episodes_opened_total 3.0" in metrics
    assert "execgym_episode_steps_total 3.0" in metrics
    assert 'execgym_episodes_finished_total{end="terminated"} 2.0' in metrics
    assert "execgym_episode_final_reward_sum 1.0" in metrics
    assert "execgym_episode_final_reward_count 2.0" in metrics


async def test_a_step_sent_again_with_its_request_id_is_answered_not_run_twice() -> None:
    """The same ``request_id`` twice at once, and once more after: one run; a new id runs."""
    built: list[FakeEpisodeEnv] = []
    async with serving(**app_kwargs(fake_backend(built, step_delay_s=0.2))) as client:
        opened = await client.post("/v1/episodes", json={"task_id": "fake/fix-add"})
        episode = opened.json()["episode_id"]
        body = {"action": FIX, "request_id": "step-1"}
        url = f"/v1/episodes/{episode}/step"
        first, again = await asyncio.gather(
            client.post(url, json=body), client.post(url, json=body)
        )
        later = await client.post(url, json=body)
        assert first.json() == again.json() == later.json()
        assert len(built[0].actions) == 1
        fresh = await client.post(url, json={"action": FIX, "request_id": "step-2"})
        assert fresh.json()["info"]["step"] == 2
        openenv = {"action": FIX, "episode_id": episode, "request_id": "step-2"}
        assert (await client.post("/step", json=openenv)).json()["metadata"]["info"]["step"] == 2
        assert len(built[0].actions) == 2


class _LosesTheFirstAnswer(httpx.AsyncBaseTransport):
    """Passes each request to the app, but loses the answer of the first step (as when
    the replica that ran it dies before answering)."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.lost = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.url.path.endswith("/step") and not self.lost:
            self.lost += 1
            await response.aclose()
            raise httpx.ReadError("connection lost", request=request)
        return response


async def test_the_client_sends_a_step_whose_answer_was_lost_again_and_it_runs_once() -> None:
    from execgym.integrations.episode_client import EpisodeClient

    built: list[FakeEpisodeEnv] = []
    app = create_app(**app_kwargs(fake_backend(built)))
    async with app.router.lifespan_context(app):
        transport = _LosesTheFirstAnswer(httpx.ASGITransport(app=app))
        async with EpisodeClient("http://execgym", transport=transport) as client:
            env = client.env("fake/fix-add")
            await env.reset()
            observation, *_ = await env.step(FIX)
            assert transport.lost == 1
            assert observation == {"tool": "write_file", "ok": True, "output": "wrote calc.py"}
            assert len(built[0].actions) == 1  # sent twice, run once
            assert (await env.step(SUBMIT))[1] == 1.0
