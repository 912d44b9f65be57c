"""Breakers through Redis: one count and one state for every worker of a queue.

Each worker counted failures in its own process (only an *opened* breaker was shared),
so with N workers a task type that crashes environments had to fail on each of them
before it was stopped (issue 21). Now the breaker lives in Redis:

- the Lua state machine gives the in-process :class:`Breakers`' views, field by field,
  for the same outcomes on the same clock;
- two real ``execgym worker`` processes (bwrap) on a real redis-server: one failure on
  each opens the breaker (threshold 2), and both quarantine the type, show it on their
  ``/metrics``, and ``execgym status --broker`` shows one view. A rollout that kills its
  own program in between is judged and never counted (the masking rule).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace

import pytest

from execgym import Rollout, RolloutLine, Task
from execgym.broker import make_jobs, score_jobs
from execgym.broker.redis_breakers import CLOSED_TTL_S, RedisBreakers
from execgym.broker.redis_streams import RedisStreamsBroker
from execgym.cli.status import _broker_status as broker_status
from execgym.limits import Limits
from execgym.ops.breakers import BreakerPolicy, Breakers, BreakerView, Ticket
from execgym.testing import RedisServer
from tests.broker.conftest import FAST, reap
from tests.conftest import require

POLICY = BreakerPolicy(failures=3, failure_rate=0.5, min_jobs=4, window_s=10, cooldown_s=5)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _task(task_id: str, **fields: object) -> Task:
    tests = "def check(candidate):\n    assert candidate() == 1\n"
    return Task(task_id=task_id, prompt="def f():\n", tests=tests, entry_point="f", **fields)


async def test_the_redis_state_machine_gives_the_in_process_views(
    redis_server: RedisServer,
) -> None:
    """Opening by count and by rate, the window sliding, quarantines, a lost probe, a
    failed and a passed probe, a late outcome, a reset: the same views on both."""
    clock = Clock()
    local = Breakers(POLICY, clock=clock)
    broker = RedisStreamsBroker(redis_server.url, FAST, prefix="sm", block_s=0.2)
    shared = broker.breaker_board(POLICY, clock=clock)
    steps: list[tuple[str, str, bool]] = [  # (step, type, failed)
        *[("run", "A", True)] * 2,
        ("tick", "", False),  # 11 s: those two slide out of the window
        ("run", "A", False),
        *[("run", "A", True)] * 3,  # three in the window: open
        *[("run", "A", False)] * 2,  # quarantined
        ("late", "A", False),  # admitted before it opened: ignored
        *[("run", "B", f) for f in (False, True, False, True)],  # 2 of 4: the rate
        ("tick", "", False),  # past the cool-down
        ("admit", "A", False),  # a probe whose outcome never comes...
        ("run", "A", False),  # ...quarantined while it is out
        ("tick", "", False),  # ...another goes out, and fails: open again
        ("run", "A", True),
        ("tick", "", False),
        ("run", "A", False),  # the probe passes: closed
        ("run", "A", True),
        ("reset", "B", False),
        ("reset", "C", False),
    ]
    reasons: set[str] = set()
    try:
        for step, task_type, failed in steps:
            if step == "tick":
                clock.now += 11
                continue
            if step == "reset":
                assert local.reset(task_type) == await shared.reset(task_type)
            else:
                await _both(local, shared, step, task_type, failed)
            views = await shared.views()
            assert _rounded(local.views()) == _rounded(views), (step, task_type)
            reasons |= {view.reason for view in views.values()}
        assert {view.state.name for view in views.values()} == {"CLOSED"}
        assert (views["A"].failures, views["A"].jobs, views["A"].quarantined) == (1, 1, 0)
        assert "the probe job failed again" in reasons
        assert "2 of 4 jobs in 10 s were infrastructure failures (threshold 50%)" in reasons
    finally:
        await broker.aclose()


async def test_a_closed_idle_breaker_expires_and_an_open_one_stays(
    redis_server: RedisServer,
) -> None:
    """With ``key=task`` a breaker per task would pile up in Redis: a closed one expires
    after :data:`CLOSED_TTL_S` without a job (then its type leaves the view); an open one
    never does."""
    broker = RedisStreamsBroker(redis_server.url, FAST, prefix="ttl", block_s=0.2)
    shared = broker.breaker_board(BreakerPolicy(failures=1))
    try:
        for task_type, failed in (("Ok", False), ("Down", True)):
            ticket, _ = await shared.admit(task_type)
            assert ticket is not None
            await shared.record(ticket, failed)
        keys = broker.keys
        assert 0 < await broker.redis.ttl(keys.breaker("Ok")) <= CLOSED_TTL_S
        assert await broker.redis.ttl(keys.breaker("Down")) == -1  # open: kept
        await broker.redis.delete(keys.breaker("Ok"), keys.breaker_jobs("Ok"))  # as expired
        assert list(await shared.views()) == ["Down"]
        assert await broker.redis.smembers(keys.breaker_types) == {"Down"}
        assert await shared.reset("Down")
        assert 0 < await broker.redis.ttl(keys.breaker("Down")) <= CLOSED_TTL_S
    finally:
        await broker.aclose()


async def _both(
    local: Breakers, shared: RedisBreakers, step: str, task_type: str, failed: bool
) -> None:
    """One job of ``task_type`` on both: the same admission, the same outcome."""
    mine = local.admit(_task(f"{task_type}/1"))
    theirs, message = await shared.admit(task_type)
    assert mine == theirs, (step, task_type)
    if mine is None:
        assert message == local.quarantine_message(task_type)
    elif step == "run":
        local.record(mine, infrastructure_failure=failed)
        await shared.record(mine, failed)
    elif step == "late":
        local.record(Ticket(task_type), infrastructure_failure=True)
        await shared.record(Ticket(task_type), True)


def _rounded(views: dict[str, BreakerView]) -> dict[str, BreakerView]:
    def rounded(view: BreakerView) -> BreakerView:
        retry = view.retry_in_s
        return replace(view, retry_in_s=None if retry is None else round(retry, 3))

    return {task_type: rounded(view) for task_type, view in views.items()}


Spawn = Callable[..., tuple[subprocess.Popen[bytes], int]]


@pytest.fixture
def spawn(redis_server: RedisServer) -> Iterator[Spawn]:
    """``execgym worker`` processes on the queue ``split``, each with /metrics on a port."""
    require(os.path.exists("/usr/bin/bwrap"), "bubblewrap (apt-get install bubblewrap)")
    started: list[subprocess.Popen[bytes]] = []

    def start() -> tuple[subprocess.Popen[bytes], int]:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        argv = [
            sys.executable, "-m", "execgym", "worker", "--broker", redis_server.url,
            "--prefix", "split", "--concurrency", "1", "--max-attempts", "1",
            "--no-warm-pool", "--visibility-timeout", "3", "--metrics-port", str(port),
            "--breakers", "failures=2,window_s=600,cooldown_s=600",
        ]  # fmt: skip
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started.append(process)
        return process, port

    yield start
    reap(started)


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[RedisStreamsBroker]:
    broker = RedisStreamsBroker(redis_server.url, FAST, prefix="split", block_s=0.2)
    yield broker
    await broker.aclose()


def _starved(number: int) -> Task:
    """A task whose limit no sandbox can meet: an infrastructure failure (breakers count it)."""
    return _task(f"Starved/{number}", limits={"wall_time_s": 1e-9})


SUICIDE = "    import os\n    os.kill(os.getpid(), 9)\n"  # the rollout's own doing


async def _batch(broker: RedisStreamsBroker, tasks: list[Task], completion: str) -> list[str]:
    items = [RolloutLine(i, Rollout(task_id=t.task_id, completion=completion))
             for i, t in enumerate(tasks)]  # fmt: skip
    jobs, _ = make_jobs({t.task_id: t for t in tasks}, items, Limits(wall_time_s=10))
    return [f"{r.result['verdict']}@{r.worker}" async for r in score_jobs(broker, jobs)]


async def _live(broker: RedisStreamsBroker, count: int) -> set[str]:
    async with asyncio.timeout(60):
        while len(live := await broker.live_workers()) != count:
            await asyncio.sleep(0.1)
    return set(live)


async def _gauge(port: int) -> str:
    """This worker's ``execgym_breaker_state`` line for ``Starved``, once it has one."""
    url = f"http://127.0.0.1:{port}/metrics"
    async with asyncio.timeout(30):
        while True:
            text = await asyncio.to_thread(lambda: urllib.request.urlopen(url).read().decode())
            lines = [ln for ln in text.splitlines() if ln.startswith("execgym_breaker_state{")]
            if lines and not lines[0].endswith(" 0.0"):
                return lines[0]
            await asyncio.sleep(0.2)


async def test_failures_split_over_two_worker_processes_open_the_breaker_on_both(
    spawn: Spawn, client: RedisStreamsBroker, redis_server: RedisServer
) -> None:
    first, _ = spawn()
    (name_a,) = await _live(client, 1)
    assert await _batch(client, [_starved(0)], "    return 1\n") == [f"sandbox_error@{name_a}"]
    killed = await _batch(client, [_task("Starved/ok")], SUICIDE)
    assert not killed[0].startswith(("sandbox_error", "quarantined")), killed  # never counted
    second, port_b = spawn()
    (name_b,) = await _live(client, 2) - {name_a}
    first.send_signal(signal.SIGTERM)  # the next job can only go to the second
    assert await asyncio.to_thread(first.wait, 30) == 0
    await _live(client, 1)
    # One failure on each worker: the shared count is 2, the threshold.
    assert await _batch(client, [_starved(1)], "    return 1\n") == [f"sandbox_error@{name_b}"]
    _third, port_c = spawn()  # never ran a job of the type
    await _live(client, 2)
    verdicts = await _batch(client, [_starved(2), _starved(3)], "    return 1\n")
    assert [v.split("@")[0] for v in verdicts] == ["quarantined"] * 2, verdicts
    for port in (port_b, port_c):
        assert (await _gauge(port)).endswith(" 2.0")  # open, on each worker's /metrics
    shown = await broker_status(redis_server.url, "split", None, as_json=False)  # its text
    assert "live workers: 2" in shown
    assert "Starved: OPEN, 2 failure(s) in 3 job(s) in the window, 2 quarantined" in shown
    assert "2 infrastructure failures in 600 s" in shown
    reset = await broker_status(redis_server.url, "split", "Starved", as_json=False)
    assert "breaker Starved: reset, now closed for every worker" in reset
    assert "Starved: CLOSED, 0 failure(s) in 0 job(s)" in reset
    assert second.poll() is None
