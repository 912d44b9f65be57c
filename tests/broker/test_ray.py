"""The Ray backend on a real local Ray cluster of several nodes, started here.

``ray.cluster_utils.Cluster`` (Ray 2.55.0's own test utility,
python/ray/cluster_utils.py) starts a head and worker nodes as separate raylets on this
machine; the sandbox actors are placed on them with SPREAD, and a node is killed with
its raylet (``remove_node(allow_graceful=False)``) in the middle of a batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from execgym import Rollout, RolloutLine, Task, Verdict
from execgym.broker import make_jobs, score_jobs, score_rollouts
from execgym.broker.ray_actors import ActorConfig
from execgym.broker.ray_broker import RayBroker, cluster_status
from execgym.limits import Limits
from execgym.ops.breakers import BreakerPolicy
from execgym.reward import load_spec
from execgym.sandbox import open_sandbox
from execgym.scoring.core import Scoring, score_rollout
from tests.conftest import require

SQUARE = Task(
    task_id="Sq/square",
    prompt="def square(x):\n",
    tests="def check(candidate):\n    assert candidate(3) == 9\n    assert candidate(-2) == 4\n",
    entry_point="square",
    reference="    return x * x\n",
)
COMPLETIONS = [
    "    return x * x\n",  # passed
    "    return x + x\n",  # failed
    "    raise ValueError('no')\n",  # failed, with the error
    "    return x ** 2\n",  # passed
    "    import sys\n    sys.exit(3)\n",  # the program exits
    "    while True:\n        pass\n",  # timeout
    "def square(x):\n    print('hi')\n    return x*x\n",  # output kept
    "    return x *\n",  # syntax error
]
LIMITS = Limits(wall_time_s=2, cpu_time_s=1)
TIMING = ("wall_time_s", "cpu_time_s", "peak_memory_bytes")

# Ray's node start-up leaves /dev/null files for the collector to close (ray/_private/
# node.py, start_gcs_server in 2.55.0): warnings of Ray's, not ours.
pytestmark = [
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.timeout(240),
]


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    """A head and one worker node of 1 CPU each (the kill test adds and kills a third).

    Shared by this module's tests and torn down after them (``ray.shutdown()`` too), so
    no later test of the session finds this process attached to a cluster.
    """
    require(importlib.util.find_spec("ray") is not None, "ray (pip install 'ray==2.55.0')")
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    import ray
    from ray.cluster_utils import Cluster

    # ray.init's FutureWarning about GPU env vars (worker.py:2051 in 2.55.0) is an error
    # under the suite's filterwarnings; the setting it asks for is the future default.
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "include_dashboard": False,
            # a killed node is found dead in about a second, not Ray's default 30 s
            "_system_config": {"health_check_period_ms": 300, "health_check_failure_threshold": 3},
        },
    )
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="execgym", log_to_driver=False)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def _items() -> list[RolloutLine]:
    return [
        RolloutLine(i, Rollout(task_id=SQUARE.task_id, completion=c))
        for i, c in enumerate(COMPLETIONS)
    ]


def _comparable(line: dict[str, Any]) -> dict[str, Any]:
    """A result line without what timing decides (times, peak memory, measured seconds)."""
    kept = {k: v for k, v in line.items() if k not in TIMING}
    kept["details"] = {k: v for k, v in line["details"].items() if not k.endswith("_s")}
    return kept


async def _through_ray(broker: RayBroker, items: list[RolloutLine], **kw: Any) -> list[Any]:
    jobs, local = make_jobs({SQUARE.task_id: SQUARE}, items, LIMITS)
    assert not local
    try:
        return [r async for r in score_jobs(broker, jobs, **kw)]
    finally:
        await broker.aclose()


async def test_a_batch_through_ray_equals_the_embedded_one(ray_cluster: Any) -> None:
    broker = RayBroker(config=ActorConfig(warm_pool=False), actors=2, concurrency=1)
    messages = await _through_ray(broker, _items(), ordered=True)
    assert [m.result["index"] for m in messages] == list(range(len(COMPLETIONS)))  # input order
    assert len({m.worker for m in messages}) == 2  # both nodes' actors scored
    async with open_sandbox("bwrap") as sandbox:
        scoring = Scoring(sandbox)
        here = [
            await score_rollout(scoring, SQUARE, item.rollout, index=item.index, limits=LIMITS)
            for item in _items()
        ]
    verdicts = [r.verdict for r in here]
    assert {Verdict.PASSED, Verdict.FAILED, Verdict.TIMEOUT} <= set(verdicts)
    for local, remote in zip(here, messages, strict=True):
        assert _comparable(remote.result) == _comparable(local.to_json())
        assert remote.scored().to_json() == remote.result  # read back whole


async def test_a_stream_through_ray_is_read_a_window_ahead_of_its_results(
    ray_cluster: Any,
) -> None:
    broker = RayBroker(config=ActorConfig(warm_pool=False), actors=2, concurrency=1)
    read = 0

    def items() -> Iterator[RolloutLine]:  # a file's lines, read lazily
        nonlocal read
        for index in range(16):
            read += 1
            yield RolloutLine(index, Rollout(task_id=SQUARE.task_id, completion=COMPLETIONS[0]))

    ahead, indexes = [], []
    try:
        async for scored in score_rollouts(
            broker, {SQUARE.task_id: SQUARE}, items(), LIMITS, ordered=True, window=4
        ):
            indexes.append(scored.index)
            ahead.append(read - len(indexes))
    finally:
        await broker.aclose()
    # The old client made every job first on Ray (15 read ahead at the first result).
    assert max(ahead) <= 4, ahead
    assert indexes == list(range(16))


async def test_a_node_killed_mid_batch_loses_and_duplicates_nothing(ray_cluster: Any) -> None:
    node = ray_cluster.add_node(num_cpus=1)
    ray_cluster.wait_for_nodes()
    broker = RayBroker(
        config=ActorConfig(warm_pool=False), actors=3, concurrency=1, cpus_per_actor=1
    )
    infos = await broker.start()
    assert len({info["node_id"] for info in infos}) == 3  # SPREAD: one actor per node
    assert node.node_id in {info["node_id"] for info in infos}
    slow = "    import time\n    time.sleep(0.4)\n    return x * x\n"
    items = [RolloutLine(i, Rollout(task_id=SQUARE.task_id, completion=slow)) for i in range(12)]
    jobs, _ = make_jobs({SQUARE.task_id: SQUARE}, items, Limits(wall_time_s=20, cpu_time_s=5))
    seen: list[Any] = []
    try:
        async for result in score_jobs(broker, jobs):
            seen.append(result)
            if len(seen) == 1:  # the third node still holds jobs: kill it, raylet and all
                await asyncio.to_thread(ray_cluster.remove_node, node, False)
    finally:
        await broker.aclose()
    assert sorted(r.job_id for r in seen) == sorted(j.job_id for j in jobs)  # one each
    assert {r.result["verdict"] for r in seen} == {"passed"}
    assert any(r.delivery_attempt == 2 for r in seen)  # the dead node's jobs ran again
    assert len(broker._slots) == 0  # closed


async def test_a_quality_batch_through_ray_keeps_every_breakdown(ray_cluster: Any) -> None:
    config = ActorConfig(warm_pool=False, reward=load_spec("quality"))
    broker = RayBroker(config=config, actors=2, concurrency=1)
    items = _items()[:4]
    messages = await _through_ray(broker, items, ordered=True)
    for message in messages:
        scored = message.scored()
        breakdown = message.result["reward_breakdown"]
        assert breakdown["spec"] == "quality"
        assert "correctness" in breakdown["components"]
        assert breakdown["total"] == scored.reward
        assert message.result["details"]["state"] == "fresh"
    assert messages[0].scored().judgement.details["reference_cpu_s"] > 0  # type: ignore[union-attr]
    assert messages[1].result["reward"] == 0.0


def _starved(number: int) -> Task:
    """A task whose limit no sandbox can meet: an infrastructure failure (breakers count it)."""
    return Task(
        task_id=f"Starved/{number}",
        prompt="def echo(x):\n",
        tests="def check(candidate):\n    assert candidate(1) == 1\n",
        entry_point="echo",
        limits={"wall_time_s": 1e-9},
    )


async def test_failures_on_one_actor_quarantine_the_type_on_every_actor(ray_cluster: Any) -> None:
    import ray

    policy = BreakerPolicy(failures=2, window_s=60, cooldown_s=600)
    broker = RayBroker(
        config=ActorConfig(warm_pool=False), actors=2, concurrency=1, breakers=policy
    )
    try:
        infos = await broker.start()
        first = broker.handles[0]
        tasks = {f"Starved/{i}": _starved(i) for i in range(6)}
        items = [RolloutLine(i, Rollout(task_id=f"Starved/{i}", completion="    return x\n"))
                 for i in range(6)]  # fmt: skip
        jobs, _ = make_jobs(tasks, items, LIMITS)
        for job in jobs[:2]:  # two failures, both on the first actor
            line = await first.judge.remote(job.to_json())
            assert '"verdict":"sandbox_error"' in line
        views = {v["task_type"]: v for v in await broker.breaker_views()}
        assert views["Starved"]["state"] == "open"
        shown = await cluster_status("ray")  # what `execgym status --broker ray` renders
        assert [v["state"] for v in shown["breakers"] if v["task_type"] == "Starved"] == ["open"]
        second = broker.handles[1]
        line = await second.judge.remote(jobs[2].to_json())  # the other node's actor
        assert '"verdict":"quarantined"' in line, line
        rest = [r async for r in score_jobs(broker, jobs[3:])]
        assert {r.result["verdict"] for r in rest} == {"quarantined"}
        assert {r.result["reward"] for r in rest} == {None}
        assert len({info["node_id"] for info in infos}) == 2  # two nodes, one breaker view
    finally:
        await broker.aclose()
        board = broker.board
        if board is not None:
            ray.kill(board)


async def test_the_trainer_client_scores_on_the_cluster_with_the_env_var(
    ray_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from execgym.integrations.client import BROKER_ENV, RewardClient

    monkeypatch.setenv(BROKER_ENV, "ray")  # what a verl or OpenRLHF job sets; no service
    truth = {"task_id": SQUARE.task_id, "prompt": SQUARE.prompt, "tests": SQUARE.tests,
             "entry_point": SQUARE.entry_point}  # fmt: skip
    async with RewardClient(reward="binary", limits=LIMITS) as client:
        assert client._ray is not None
        scores = await client.score_many(
            [("```python\ndef square(x):\n    return x * x\n```", truth),
             ("```python\ndef square(x):\n    return x + x\n```", truth)]
        )  # fmt: skip
        workers = await client._ray.live_workers()
    assert [s.verdict for s in scores] == ["passed", "failed"]
    assert [s.reward for s in scores] == [1.0, 0.0]
    assert len(workers) == 2  # one actor per node of the cluster


def test_execgym_score_broker_ray_keeps_input_order_and_the_reward(
    ray_cluster: Any, tmp_path: Any
) -> None:

    import ray
    from click.testing import CliRunner

    from execgym.broker.ray_broker import BOARD_NAME, NAMESPACE
    from execgym.cli import main

    tasks, rollouts, out = tmp_path / "tasks.jsonl", tmp_path / "rollouts.jsonl", tmp_path / "r"
    tasks.write_text(SQUARE.model_dump_json() + "\n")
    lines = [{"task_id": SQUARE.task_id, "completion": c} for c in COMPLETIONS[:3]]
    lines.insert(1, {"task_id": "Nope/1", "completion": "x"})  # invalid, scored here
    rollouts.write_text("".join(json.dumps(line) + "\n" for line in lines))
    try:
        shown = CliRunner().invoke(
            main,
            ["score", str(tasks), str(rollouts), "--broker", "ray", "--reward", "quality",
             "--workers", "1", "--no-warm-pool", "-o", str(out)],
        )  # fmt: skip
    finally:
        with contextlib.suppress(ValueError):
            ray.kill(ray.get_actor(BOARD_NAME, namespace=NAMESPACE))
    assert shown.exit_code == 0, shown.output
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["index"] for r in results] == [0, 1, 2, 3]  # input order (the default)
    assert [r["verdict"] for r in results] == ["passed", "invalid", "failed", "error"]
    assert all(
        r["reward_breakdown"]["spec"] == "quality" for r in results if r["reward"] is not None
    )
    assert "broker: ray" in shown.output


async def test_an_episode_on_a_ray_actor_outlives_its_replica_and_ends_masked_with_it(
    ray_cluster: Any, tmp_path: Path
) -> None:
    """A real ``execgym serve`` replica attached to the cluster opens an episode
    (starting the episode actors and the directory) and is SIGKILLed; this process
    finishes it (reward 1). An agent that kills its sandbox gets 0; an actor killed under
    an episode ends it with reward null and the reason."""
    import httpx
    import ray

    from execgym.broker.ray_episodes import RayEpisodes
    from execgym.episodes import example_tasks, find_task
    from execgym.errors import EpisodeOver
    from tests.episode_scripts import PAGER, solution
    from tests.server.test_episode_replicas import wait_healthy
    from tests.server.test_serve import free_port

    env = {
        **os.environ,
        "RAY_ADDRESS": ray_cluster.address,  # what "ray" (address="auto") attaches to
        "EXECGYM_SERVER_EPISODE_BROKER": "ray",
        "EXECGYM_SERVER_EPISODE_ACTOR_CPUS": "0.1",
    }
    actions = solution(PAGER)
    url = f"http://127.0.0.1:{free_port()}"
    argv = [sys.executable, "-m", "execgym", "serve", "--port", url.rsplit(":", 1)[1]]
    with (tmp_path / "serve.log").open("wb") as log:
        replica = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        await asyncio.to_thread(wait_healthy, url, replica, tmp_path / "serve.log")
        opened = await asyncio.to_thread(
            httpx.post, f"{url}/v1/episodes", json={"task_id": PAGER}, timeout=180
        )
        assert opened.status_code == 201, opened.text
        episode_id = opened.json()["episode_id"]
        first = await asyncio.to_thread(
            httpx.post, f"{url}/v1/episodes/{episode_id}/step", json=actions[0], timeout=60
        )
        assert first.json()["reward"] == 0.0
    finally:
        replica.kill()  # the replica dies, with no goodbye
        await asyncio.to_thread(replica.wait)
    episodes = RayEpisodes(cpus_per_actor=0.1)
    try:
        outcomes = [await episodes.step(episode_id, action) for action in actions[1:]]
        assert (outcomes[-1].reward, outcomes[-1].terminated) == (1.0, True)
        assert (await episodes.get_view(episode_id)).steps == len(actions)

        task = find_task(PAGER, example_tasks())
        orphan, _ = await episodes.open(task)
        await episodes.step(orphan, {"tool": "run_command", "arguments": {"command": "kill -9 -1"}})
        assert (await episodes.get_view(orphan)).reward == 0.0  # the agent's doing: 0
        orphan, _ = await episodes.open(task)
        worker = (await episodes.get_view(orphan)).worker
        assert worker is not None
        ray.kill(ray.get_actor(worker, namespace="execgym"))
        ended = await episodes.step(orphan, {"tool": "list_dir", "arguments": {}})
        assert (ended.reward, ended.truncated, ended.info["masked"]) == (None, True, True)
        assert worker in ended.info["reason"]
        assert "gone" in ended.info["reason"]
        view = await episodes.get_view(orphan)
        assert (view.state, view.reward, view.reason) == ("finished", None, ended.info["reason"])
        with pytest.raises(EpisodeOver, match="masked"):
            await episodes.step(orphan, {"tool": "list_dir", "arguments": {}})
    finally:
        await episodes.terminate()


def test_calibration_diagnostics_and_completion_order_through_ray(
    ray_cluster: Any, tmp_path: Any, embedded_parity: list[dict[str, Any]]
) -> None:
    """``--calibrate-limits`` and ``--diagnose`` were refused with a broker (issue 21):
    each reference is now judged once on the cluster and its measurement sent with the
    task's jobs; the results equal the embedded ones field by field (but for measured
    times), written as they finish with ``--order completion``."""
    from tests.broker.parity import check_parity, score

    results = score(tmp_path, "ray", "--broker", "ray", "--workers", "1", "--order", "completion")
    indexes = [r["index"] for r in results]
    assert indexes[0] != 0  # as they finished: the slow first rollout was not first
    check_parity(results, embedded_parity)


async def test_serve_with_broker_ray_scores_http_jobs_on_the_actors(ray_cluster: Any) -> None:
    """``execgym serve --broker ray``: ``/v1/score`` jobs go to sandbox actors."""
    from execgym.server import ServerSettings
    from execgym.testing import FakeSandbox, fake_result
    from tests.server.conftest import NO_TOOLS, serving

    never = FakeSandbox(lambda call: fake_result(exit_code=1))  # the service runs nothing
    settings = ServerSettings(broker="ray", warm_pool=False, workers=1, breakers="off")
    body = {
        "tasks": [SQUARE.model_dump(mode="json")],
        "rollouts": [{"task_id": SQUARE.task_id, "completion": c} for c in COMPLETIONS[:3]],
        "limits": {"wall_time_s": 5},
    }
    async with serving(settings=settings, sandbox=never, toolchains=NO_TOOLS) as client:
        job = (await client.post("/v1/score", json=body)).json()
        status = (await client.get("/v1/status")).json()
    assert never.calls == []
    assert [r["verdict"] for r in job["results"]] == ["passed", "failed", "error"]
    assert status["completed"] == 3


def test_validate_broker_ray_reports_what_validating_here_reports(
    ray_cluster: Any, tmp_path: Path
) -> None:
    from tests.broker.test_validate_broker import checks, validate
    from tests.validation import planted

    tasks = tmp_path / "tasks.jsonl"
    chosen = (planted.GOOD, planted.WRONG_REFERENCE)
    tasks.write_text("".join(t.model_dump_json(exclude_none=True) + "\n" for t in chosen))
    options = ("--no-warm-pool", "--workers", "1")  # one sandbox per 1-CPU actor
    here = validate(tasks, tmp_path / "here.json", *options)
    remote = validate(tasks, tmp_path / "ray.json", *options, "--broker", "ray")
    assert checks(remote) == checks(here)
    assert [t["kept"] for t in remote["tasks"]] == [True, False]
    assert remote["summary"]["sandbox_runs"] == here["summary"]["sandbox_runs"] > 0
