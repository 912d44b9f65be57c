"""Real SWE-style tasks (tests/data/swe, built by its build.py from the projects' history).

Each is a real bug fix of a real project: the repository at the fix's parent commit, the
fix's source changes as the gold ``patch`` and its tests as the ``test_patch``, in an
environment built once per session from a declarative spec (the Debian test image plus
pytest from PyPI). Scored in one batch through ``execgym score`` and through a real
redis-server with a worker process; one episode per project solved by a scripted agent
in the environment.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from execgym.cli import main
from execgym.environments import Environment, EnvironmentCache
from execgym.environments.routing import resolve
from execgym.episodes import AsyncEnv, ScriptedAgent
from execgym.episodes.swe import apply_patch, load_instances, patched_paths, repo_task
from execgym.episodes.task import repo_files
from execgym.testing import RedisServer
from tests.broker.test_ray import ray_cluster  # noqa: F401 (the local Ray cluster)
from tests.conftest import require

DATA = Path(__file__).resolve().parents[1] / "data" / "swe"
INSTANCES = DATA / "instances.jsonl"
ROWS = [json.loads(line) for line in INSTANCES.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="session")
def swe_environment(env_cache: EnvironmentCache, debian: Environment) -> Environment:
    """The real tasks' environment (one spec for all of them), built once per session."""
    specs = {json.dumps(row["environment"], sort_keys=True) for row in ROWS}
    assert len(specs) == 1
    return resolve(ROWS[0]["environment"], env_cache)


def predictions(path: Path, rows: list[dict[str, Any]] = ROWS) -> Path:
    """Gold and empty predictions of ``rows``, in SWE-bench's prediction format."""
    lines = []
    for row in rows:
        for model, patch in (("gold", row["patch"]), ("empty", "")):
            line = {"instance_id": row["instance_id"], "model_patch": patch}
            lines.append({**line, "model_name_or_path": model})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def verdicts(path: Path) -> dict[str, tuple[str, float | None]]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return {r["rollout_id"]: (r["verdict"], r["reward"]) for r in rows}


def expected(rows: list[dict[str, Any]]) -> dict[str, tuple[str, float]]:
    """Each prediction's verdict and reward: gold resolves, the empty patch does not."""
    return {
        f"{row['instance_id']}#{model}": verdict
        for row in rows
        for model, verdict in (("gold", ("passed", 1.0)), ("empty", ("failed", 0.0)))
    }


_PASS_ALL = [
    "import pytest",
    "@pytest.hookimpl(hookwrapper=True)",
    "def pytest_runtest_makereport(item, call):",
    "    outcome = yield",
    "    outcome.get_result().outcome = 'passed'",
]
FORGED = "".join(
    f"diff --git a/{name} b/{name}\nnew file mode 100644\n--- /dev/null\n+++ b/{name}\n"
    f"@@ -0,0 +1,{len(_PASS_ALL)} @@\n" + "".join(f"+{line}\n" for line in _PASS_ALL)
    for name in ("conftest.py", "toolz/tests/conftest.py")
)
"""A model patch that plants conftest.py files reporting every test as passed."""
GARBAGE = "diff --git a/nope.py b/nope.py\n--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-x\n+y\n"

ONE_PER_PROJECT = list({row["repo"]: row for row in reversed(ROWS)}.values())


def test_the_tasks_are_real_fixes_with_their_sources() -> None:
    projects = Counter(row["repo"] for row in ROWS)
    assert len(ROWS) >= 12, projects
    assert len(projects) >= 4, projects
    assert (DATA / "SOURCE.md").is_file()
    assert len(list((DATA / "licenses").iterdir())) == len(projects)
    for row in ROWS:
        assert row["FAIL_TO_PASS"]
        assert set(row["FAIL_TO_PASS"]).isdisjoint(row["PASS_TO_PASS"])
        with tarfile.open(DATA / row["snapshot"]) as archive:
            names = archive.getnames()
        # the snapshot is the base commit's files only: no git objects, refs or reflog
        assert not [n for n in names if ".git/" in n or n.startswith(".git")]
        assert all(
            not name.startswith(("test", "tests")) and "/tests/" not in name
            for name in patched_paths(row["patch"])
        )


@pytest.mark.timeout(900)  # the environment build (once) and 24 real test runs
def test_gold_and_empty_patches_in_one_batch_through_execgym_score(
    swe_environment: Environment,
    env_cache: EnvironmentCache,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("EXECGYM_ENV_CACHE", str(env_cache.root))
    # the spec's pip packages change /opt: /usr is the base image's, shared, not copied
    assert "/usr" in dict(swe_environment.shared)
    monkeypatch.chdir(DATA)  # the instances name their snapshots relative to it
    out = tmp_path / "results.jsonl"
    preds = predictions(tmp_path / "p.jsonl")
    toolz = next(row["instance_id"] for row in ROWS if row["repo"] == "pytoolz/toolz")
    with preds.open("a") as more:  # a patch that forges the tests, and one that does not apply
        for model, patch in (("forged", FORGED), ("garbage", GARBAGE)):
            line = {"instance_id": toolz, "model_patch": patch, "model_name_or_path": model}
            more.write(json.dumps(line) + "\n")
    args = ["score", str(INSTANCES), str(preds), "-o", str(out)]
    result = CliRunner().invoke(main, [*args, "--workers", "4"])
    assert result.exit_code == 0, result.output
    forged = {f"{toolz}#forged": ("failed", 0.0), f"{toolz}#garbage": ("failed", 0.0)}
    assert verdicts(out) == {**expected(ROWS), **forged}
    garbage = next(line for line in out.read_text().splitlines() if "#garbage" in line)
    assert "PatchDoesNotApply" in garbage


@pytest.mark.timeout(900)  # the environment build (once) and 24 real test runs
def test_every_task_through_redis_and_a_worker_process(
    swe_environment: Environment,
    env_cache: EnvironmentCache,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    require(shutil.which("redis-server") is not None, "redis-server (apt-get install redis-server)")
    server = RedisServer(tmp_path / "redis")
    (tmp_path / "redis").mkdir()
    server.start()
    env = {**os.environ, "EXECGYM_ENV_CACHE": str(env_cache.root)}
    log = (tmp_path / "worker.log").open("wb")
    # The instances name their snapshots relative to the client's cwd, as for a local
    # batch; the worker runs elsewhere: the jobs carry the paths made absolute.
    monkeypatch.chdir(DATA)
    worker = subprocess.Popen(
        [sys.executable, "-m", "execgym", "worker", "--broker", server.url, "--concurrency", "4"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    try:
        out = tmp_path / "results.jsonl"
        # every task, gold and empty in one batch, in the environment the batch above built
        preds = predictions(tmp_path / "p.jsonl")
        args = ["score", str(INSTANCES), str(preds), "-o", str(out)]
        result = CliRunner().invoke(main, [*args, "--broker", server.url])
        assert result.exit_code == 0, result.output
        assert verdicts(out) == expected(ROWS)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(60) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        log.close()
        server.kill()


def _gold_actions(row: dict[str, Any], files: dict[str, bytes]) -> list[dict[str, Any]]:
    """The fix written file by file, a command run with the environment's Python, submit."""
    fixed = apply_patch(files, row["patch"])
    writes = [
        {"tool": "write_file", "arguments": {"path": name, "content": fixed[name].decode()}}
        for name in patched_paths(row["patch"])
    ]
    probe = (
        "python -c 'import os, sys; print(sys.version_info[:2], os.path.realpath(sys.executable))'"
    )
    return [{"tool": "run_command", "arguments": {"command": probe}}, *writes, {"tool": "submit"}]


@pytest.mark.timeout(900)  # the environment build (once) and 24 real test runs
def test_one_episode_per_project_solved_in_its_environment(
    swe_environment: Environment, env_cache: EnvironmentCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXECGYM_ENV_CACHE", str(env_cache.root))
    tasks = {task.task_id: task for task in load_instances(INSTANCES)}
    firsts = {row["repo"]: row for row in ONE_PER_PROJECT}

    async def play(row: dict[str, Any]) -> Any:
        task = repo_task(tasks[row["instance_id"]])
        async with AsyncEnv(task) as env:
            agent = ScriptedAgent(_gold_actions(row, repo_files(task)))
            return await agent.arun(env)

    async def play_all() -> list[Any]:
        return await asyncio.gather(*(play(row) for row in firsts.values()))

    results = asyncio.run(play_all())
    for row, result in zip(firsts.values(), results, strict=True):
        assert result.reward == 1.0, (row["instance_id"], result.info["message"])
        first = result.observations[1]["output"]
        assert "(3, 11)" in first, first  # Debian's Python, not the host's
        assert "/usr/bin/python3" in first, first


@pytest.mark.timeout(900)  # the environment build (once), two actors and 2 real test runs
@pytest.mark.filterwarnings("ignore::ResourceWarning")  # Ray's node start-up (test_ray.py)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_task_through_ray_sandbox_actors_in_the_clients_environment_cache(
    swe_environment: Environment,
    env_cache: EnvironmentCache,
    ray_cluster: Any,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the cluster's raylets were started without this variable: the actors get the
    # client's cache through their ActorConfig, not through their own environment
    monkeypatch.setenv("EXECGYM_ENV_CACHE", str(env_cache.root))
    built = set(env_cache.root.joinpath("envs").iterdir())
    # snapshots are named relative to the client's cwd; the actors' cwd is Ray's own
    monkeypatch.chdir(DATA)
    out = tmp_path / "results.jsonl"
    rows = ONE_PER_PROJECT[:1]
    preds = predictions(tmp_path / "p.jsonl", rows)
    args = ["score", str(INSTANCES), str(preds), "-o", str(out), "--broker", "ray"]
    result = CliRunner().invoke(main, [*args, "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert verdicts(out) == expected(rows)
    assert set(env_cache.root.joinpath("envs").iterdir()) == built  # used, not built again
