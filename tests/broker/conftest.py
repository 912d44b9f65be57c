"""A real redis-server per test, on a free port, with AOF on; brokers over it and in memory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from execgym import Rollout, Task
from execgym.broker import BrokerSettings, JobMessage, MemoryBroker
from execgym.broker.redis_streams import RedisStreamsBroker
from execgym.limits import Limits
from execgym.testing import RedisServer
from tests.conftest import require

HERE = Path(__file__).parent
FAKE_WORKER = HERE / "fake_worker.py"
REPO = HERE.parent.parent

TASK = Task(
    task_id="t/1",
    prompt="def f():\n",
    tests="def check(c):\n    assert c() == 1\n",
    entry_point="f",
)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    require(shutil.which("redis-server") is not None, "redis-server (apt-get install redis-server)")
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture(scope="session")
def embedded_parity(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, object]]:
    """The parity batch (tests/broker/parity.py) scored here, once for the session."""
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    from tests.broker.parity import score

    directory = tmp_path_factory.mktemp("embedded-parity")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(directory / "cache"))  # measured, not cached
        return score(directory, "here", "--workers", "1")


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Worker processes a test starts (append them); reaped when the test ends."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    reap(started)


FAST = BrokerSettings(visibility_timeout_s=1.0, retry_after_s=0.05, max_queue_length=10_000)


@pytest.fixture(params=["embedded", "redis"])
async def broker(request: pytest.FixtureRequest) -> AsyncIterator[object]:
    if request.param == "embedded":
        yield MemoryBroker(FAST)
        return
    server = request.getfixturevalue("redis_server")
    redis_broker = RedisStreamsBroker(server.url, FAST, prefix="t", block_s=0.2)
    try:
        yield redis_broker
    finally:
        await redis_broker.aclose()


def job(index: int, completion: str = "    return 1\n", batch: str = "b") -> JobMessage:
    return JobMessage(
        job_id=f"{batch}/{index}",
        batch_id=batch,
        index=index,
        task=TASK,
        rollout=Rollout(task_id="t/1", completion=completion),
        limits=Limits(wall_time_s=5),
    )


def spawn_fake_worker(
    url: str, prefix: str, *, concurrency: int = 4, visibility_s: float = 1.0, max_attempts: int = 3
) -> subprocess.Popen[bytes]:
    """A worker process judging with a scripted sandbox (see fake_worker.py)."""
    argv = [
        sys.executable, str(FAKE_WORKER), url,
        "--prefix", prefix,
        "--concurrency", str(concurrency),
        "--visibility", str(visibility_s),
        "--max-attempts", str(max_attempts),
    ]  # fmt: skip
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def reap(processes: list[subprocess.Popen[bytes]]) -> None:
    """Kill what is still running of ``processes`` and wait for all of them."""
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait()
        if process.stderr is not None:
            process.stderr.close()


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")
