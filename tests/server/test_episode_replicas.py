"""Two real ``execgym serve`` replicas share the episodes of a real episode worker.

Everything here is a process of its own, as in a deployment: a ``redis-server`` on a
free port, one ``execgym episode-worker`` holding the sessions (real bwrap), and two
uvicorn replicas of ``execgym serve`` with ``EXECGYM_SERVER_EPISODE_BROKER`` set. An
episode opened on replica A is finished through replica B after A is killed (a step
whose answer A took with it, sent again through B, is answered and not run twice); an episode
whose worker is killed ends with reward null and the reason; an agent that kills its
own sandbox, or tries to reach Redis from it, gets 0, never null.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from execgym.testing import RedisServer
from tests.conftest import require
from tests.episode_scripts import PAGER, solution
from tests.server.test_serve import free_port

TOKEN = "replica-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
PREFIX = "replicas"
HEARTBEAT_TTL_S = 3.0  # refreshed each second: a loaded machine does not miss it

pytestmark = pytest.mark.timeout(300)


def wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Wait for ``execgym serve`` at ``url`` to answer ``/healthz``; fail with its log."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"execgym serve exited early ({proc.returncode}): {log.read_text()}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    pytest.fail(f"execgym serve did not answer /healthz within 90 s: {log.read_text()}")


@contextlib.contextmanager
def deployment(tmp_path: Path) -> Iterator[dict[str, object]]:
    """Redis, one episode worker and two replicas; every process is stopped at the end."""
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    require(shutil.which("redis-server") is not None, "redis-server (apt-get install redis-server)")
    redis = RedisServer(tmp_path)
    redis.persistence = False
    redis.start()
    procs: list[subprocess.Popen[bytes]] = []
    env = {
        **os.environ,
        "EXECGYM_SERVER_TOKEN": TOKEN,
        "EXECGYM_SERVER_EPISODE_BROKER": redis.url,
        "EXECGYM_SERVER_EPISODE_PREFIX": PREFIX,
    }

    def start(name: str, *args: str) -> subprocess.Popen[bytes]:
        with (tmp_path / f"{name}.log").open("wb") as log:
            argv = [sys.executable, "-m", "execgym", *args]
            proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        procs.append(proc)
        return proc

    try:
        worker = start(
            "worker",
            "episode-worker", "--broker", redis.url, "--prefix", PREFIX,
            "--heartbeat-ttl", str(HEARTBEAT_TTL_S), "--max-episodes", "3",
        )  # fmt: skip
        ports = [free_port(), free_port()]
        replicas = [start(f"replica{i}", "serve", "--workers", "1", "--port", str(port))
                    for i, port in enumerate(ports)]  # fmt: skip
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        for i, (url, proc) in enumerate(zip(urls, replicas, strict=True)):
            wait_healthy(url, proc, tmp_path / f"replica{i}.log")
        yield {"worker": worker, "replicas": replicas, "urls": urls, "redis": redis}
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        redis.kill()


def _step(url: str, episode: str, action: dict[str, object]) -> httpx.Response:
    url = f"{url}/v1/episodes/{episode}/step"
    return httpx.post(url, json=action, headers=HEADERS, timeout=120)


def _open(url: str) -> str:
    opened = httpx.post(f"{url}/v1/episodes", json={"task_id": PAGER}, headers=HEADERS, timeout=120)
    assert opened.status_code == 201, opened.text
    return str(opened.json()["episode_id"])


def _run(command: str) -> dict[str, object]:
    return {"tool": "run_command", "arguments": {"command": command}}


def test_episodes_outlive_a_replica_and_end_masked_with_their_worker(tmp_path: Path) -> None:
    with deployment(tmp_path) as cluster:
        a, b = cluster["urls"]  # type: ignore[misc]
        replica_a = cluster["replicas"][0]  # type: ignore[index]
        worker: subprocess.Popen[bytes] = cluster["worker"]  # type: ignore[assignment]
        redis_port = cluster["redis"].port  # type: ignore[attr-defined]

        # opened and stepped on A; A dies; B finishes it: the solution gets reward 1
        solved = _open(a)
        actions = solution(PAGER)
        first = _step(a, solved, actions[0])
        assert first.status_code == 200, first.text
        count = {"action": _run("echo x >> count.txt && wc -l < count.txt"), "request_id": "c1"}
        counted = _step(a, solved, count).json()
        assert counted["observation"]["output"].strip() == "1"
        replica_a.send_signal(signal.SIGKILL)
        replica_a.wait()
        # its answer lost with A, the client sends the step again through B: answered, not
        # run again (the same output; the file has one line)
        assert _step(b, solved, count).json() == counted
        answers = [_step(b, solved, action) for action in actions[1:]]
        assert all(answer.status_code == 200 for answer in answers), answers[-1].text
        last = answers[-1].json()
        assert (last["reward"], last["terminated"]) == (1.0, True), last
        state = httpx.get(f"{b}/v1/episodes/{solved}", headers=HEADERS, timeout=30).json()
        assert (state["state"], state["reward"]) == ("finished", 1.0)
        assert state["steps"] == len(actions) + 1  # the step sent twice counts once
        assert state["worker"]
        assert state["reason"] is None

        # the agent kills everything in its sandbox and tries Redis: its own failure, 0
        hostile = _open(b)
        probe = _run(
            f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {redis_port}))\""
        )
        reached = _step(b, hostile, probe).json()
        assert reached["observation"]["ok"] is False  # no network in the session
        killed = _step(b, hostile, _run("kill -9 -1")).json()
        if not (killed["terminated"] or killed["truncated"]):
            killed = _step(b, hostile, {"tool": "submit", "arguments": {}}).json()
        assert killed["reward"] == 0.0, killed
        assert killed["info"]["masked"] is False
        assert worker.poll() is None  # the worker lives on

        # the worker holding a session is killed: the next step ends it, reward null
        orphan = _open(b)
        assert _step(b, orphan, _run("echo still here")).json()["observation"]["ok"] is True
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        ended = _step(b, orphan, _run("echo hello"))
        assert ended.status_code == 200, ended.text
        body = ended.json()
        assert (body["reward"], body["terminated"], body["truncated"]) == (None, False, True)
        assert body["info"]["masked"] is True
        assert "stopped answering" in body["info"]["reason"]
        assert state["worker"] in body["info"]["reason"]
        view = httpx.get(f"{b}/v1/episodes/{orphan}", headers=HEADERS, timeout=30).json()
        assert (view["state"], view["reward"], view["reason"]) == (
            "finished",
            None,
            body["info"]["reason"],
        )
        again = _step(b, orphan, _run("echo hello"))
        assert again.status_code == 409
        assert "masked" in again.json()["message"]
        # and no worker is left: opening says so, with the command to start one
        refused = httpx.post(
            f"{b}/v1/episodes", json={"task_id": PAGER}, headers=HEADERS, timeout=30
        )
        assert refused.status_code == 503
        assert "execgym episode-worker" in refused.json()["message"]
