"""``POST /v1/score`` with ``stream: true``: NDJSON lines as results finish (issue 23).

On a real uvicorn socket in this event loop, so that lines arrive as they are written,
a client can leave mid-stream, and the objects the service holds can be counted.
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import uvicorn

from execgym.sandbox import RunRequest, RunResult
from execgym.scoring import ScoredRollout
from execgym.server import ServerSettings, create_app
from execgym.server.jobs import HeldResult
from execgym.tasks.models import Rollout
from execgym.testing import FakeSandbox, free_port, harness_pass
from tests.conftest import ONE_TASK
from tests.server.conftest import NO_TOOLS


@dataclass
class GatedSandbox(FakeSandbox):
    """Passes the first ``free`` runs; later ones wait for ``gate`` (or a cancel)."""

    free: int = 1_000_000
    started: int = 0
    active: int = 0
    gate: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self, request: RunRequest) -> RunResult:
        self.started += 1
        self.active += 1
        try:
            if self.started > self.free:
                await self.gate.wait()
            return await super().run(request)
        finally:
            self.active -= 1


@dataclass
class Served:
    url: str
    app: Any
    sandbox: GatedSandbox


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    sandbox = GatedSandbox(harness_pass, keep_calls=False)
    settings = ServerSettings(workers=2, max_in_flight=256)
    app = create_app(settings=settings, sandbox=sandbox, toolchains=NO_TOOLS)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    serving = asyncio.create_task(server.serve())
    for _ in range(500):
        if server.started:
            break
        await asyncio.sleep(0.01)
    try:
        yield Served(f"http://127.0.0.1:{port}", app, sandbox)
    finally:
        sandbox.gate.set()
        server.should_exit = True
        await serving


def batch(count: int, **extra: Any) -> dict[str, Any]:
    rollouts: list[Any] = [{"task_id": "t/1", "completion": "    return 1\n"}] * count
    return {"tasks": [ONE_TASK], "rollouts": [*rollouts, {"task_id": "nope"}], **extra}


async def lines(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    async for line in response.aiter_lines():
        if line:
            yield json.loads(line)


def alive(kind: type) -> int:
    gc.collect()
    # type(), not isinstance(): isinstance reads __class__, which warns on torch objects
    return sum(1 for item in gc.get_objects() if type(item) is kind)


@pytest.mark.parametrize("order", ["input", "completion"])
async def test_a_streamed_batch_sends_every_result_line_once_then_the_summary(
    served: Served, order: str
) -> None:
    async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
        body = batch(12, stream=True, order=order)
        async with client.stream("POST", "/v1/score", json=body) as response:
            assert response.status_code == 200
            assert response.headers["content-type"] == "application/x-ndjson"
            got = [item async for item in lines(response)]
    *results, last = got
    summary = last["summary"]
    indices = [result["index"] for result in results]
    assert sorted(indices) == list(range(13))  # each once, the invalid one too
    if order == "input":
        assert indices == list(range(13))
    assert results[12]["verdict"] == "invalid"
    assert {result["verdict"] for result in results[:12]} == {"passed"}
    assert summary["state"] == "done"
    assert summary["total"] == summary["finished"] == 13
    assert summary["counts"] == {"passed": 12, "invalid": 1}
    # A streamed job's results went to its stream only; its id gives its state and
    # counts (the old service answered 404: no such job).
    async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
        answer = await client.get(f"/v1/jobs/{summary['job_id']}")
    assert answer.status_code == 200, answer.text
    view = answer.json()
    assert view["streamed"] is True
    assert view["results"] == []
    assert {key: view[key] for key in summary if key != "message"} == {
        key: value for key, value in summary.items() if key != "message"
    }


async def test_a_stream_holds_no_written_result_nor_its_rollout(served: Served) -> None:
    served.sandbox.free = 40  # the 41st run waits: the job is still running while we count
    before = {kind: alive(kind) for kind in (HeldResult, ScoredRollout, Rollout)}
    async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
        body = batch(41, stream=True, order="completion")
        async with client.stream("POST", "/v1/score", json=body) as response:
            assert response.status_code == 200
            stream = lines(response)
            # 40 passed and the invalid one; the 41st rollout is still running.
            first = [await anext(stream) for _ in range(41)]
            assert all("summary" not in item for item in first)
            del first
            held = {kind: alive(kind) - before[kind] for kind in before}
            # Old: the job kept every result until its TTL and the request's rollouts
            # until it ended (41 HeldResult, 41 Rollout).
            assert held[HeldResult] <= 1
            assert held[ScoredRollout] <= 1  # the scorer's last one, until its next
            assert held[Rollout] <= 2  # the one running (and the one the scorer read ahead)
            served.sandbox.gate.set()
            rest = [item async for item in stream]
    assert [item["summary"]["finished"] for item in rest[-1:]] == [42]


async def test_a_client_that_leaves_cancels_the_rest_of_the_job(served: Served) -> None:
    served.sandbox.free = 2
    service = served.app.state.service
    body = batch(30, stream=True)
    async with (
        httpx.AsyncClient(base_url=served.url, timeout=30) as client,
        client.stream("POST", "/v1/score", json=body) as response,
    ):
        stream = lines(response)
        first = [await anext(stream) for _ in range(2)]
        assert [item["index"] for item in first] == [0, 1]
        assert service.capacity.in_flight > 0
    # Gone: the runs waiting were cancelled, their slots released, no more were started.
    for _ in range(3000):  # up to 30 s on a loaded host; ends as soon as it holds
        if served.sandbox.active == 0 and service.capacity.in_flight == 0:
            break
        await asyncio.sleep(0.01)
    assert (served.sandbox.active, service.capacity.in_flight) == (0, 0)
    started = served.sandbox.started
    assert started <= 6
    await asyncio.sleep(0.2)
    assert served.sandbox.started == started
