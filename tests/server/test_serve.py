"""Smoke test: ``execgym serve`` runs a real uvicorn; a verl-shaped request goes over TCP."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import require
from tests.server.test_run_code import VERL_HEADERS, verl_body


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def serving(env: dict[str, str], *args: str) -> Iterator[str]:
    """``execgym [ARGS] serve --port P`` in a process; its URL once ``/healthz`` answers.

    ``args`` are the group's options (``--log-format json``) then ``serve``'s, split at
    ``serve``; stopped with SIGTERM (then killed) at the end.
    """
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    port = free_port()
    split = args.index("serve") if "serve" in args else 0
    group, serve_args = args[:split], args[split + 1 :] if "serve" in args else args
    argv = [sys.executable, "-m", "execgym", *group, "serve", "--port", str(port), *serve_args]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                output = proc.stdout.read().decode() if proc.stdout else ""
                pytest.fail(f"execgym serve exited early ({proc.returncode}): {output}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        else:
            pytest.fail("execgym serve did not answer /healthz within 60 s")
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()


@pytest.fixture
def server() -> Iterator[str]:
    env = {**os.environ, "EXECGYM_SERVER_TOKEN": "smoke-token"}
    with serving(env, "--workers", "1") as url:
        yield url


def test_serve_answers_verl_over_tcp(server: str) -> None:
    headers = {**VERL_HEADERS, "Authorization": "Bearer smoke-token"}
    body = verl_body("print(int(input()) * 2)", "21\n")
    response = httpx.post(f"{server}/run_code", content=body, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["status"] == "Success"
    assert answer["run_result"]["stdout"] == "42\n"
    assert httpx.post(f"{server}/run_code", content=body, timeout=30).status_code == 401
    ping = httpx.get(f"{server}/v1/ping", headers=headers, timeout=5)
    assert ping.json() == "pong"


def test_serve_refuses_bad_settings_with_exit_1(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from execgym.cli import main

    monkeypatch.setenv("EXECGYM_SERVER_WORKRES", "2")
    result = CliRunner().invoke(main, ["serve"])
    assert result.exit_code == 1
    assert "unknown setting EXECGYM_SERVER_WORKRES" in result.output
    monkeypatch.delenv("EXECGYM_SERVER_WORKRES")
    if os.geteuid() == 0:
        as_root = CliRunner().invoke(main, ["serve", "--isolation", "none"])
        assert as_root.exit_code == 1
        assert "root" in as_root.output
    usage = CliRunner().invoke(main, ["serve", "--port", "0"])
    assert usage.exit_code == 2


def test_serve_flags_reach_run_code_and_openenv_plays_a_real_episode() -> None:
    """A real ``execgym serve --run-code-network loopback``: a SandboxFusion request (no
    ``network`` field) serves and calls itself on 127.0.0.1; OpenEnv's own client
    (``openenv-core``) plays a shipped example task over ``/ws`` in a real sandbox."""
    from importlib.util import find_spec

    from tests.server.test_sandboxfusion_conformance import PROGRAMS

    require(find_spec("openenv") is not None, "openenv-core (pip install 'execgym[dev]')")
    from openenv.core import GenericEnvClient

    with serving(dict(os.environ), "--workers", "1", "--run-code-network", "loopback") as url:
        body = {"language": "python", "code": PROGRAMS["python"]["loopback"]}
        answer = httpx.post(f"{url}/run_code", json=body, timeout=60).json()
        assert answer["status"] == "Success", answer
        assert answer["run_result"]["stdout"] == "served\n"
        with GenericEnvClient(base_url=url, message_timeout_s=120).sync() as env:
            first = env.reset(task_id="example/pager-last-page")
            assert "last" in first.observation["problem_statement"].lower()
            listed = env.step({"tool": "list_dir", "arguments": {"path": "."}})
            assert listed.observation["ok"] is True
            assert "pager" in listed.observation["output"]
            assert (listed.done, env.state()["step_count"]) == (False, 1)
