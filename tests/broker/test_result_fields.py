"""Through ``--broker redis://`` a result keeps every field a local result has.

The client read results back field by field and dropped ``details`` and
``reward_breakdown``: every result that came through Redis had ``"details": {}``
(issue 19). A real worker (bwrap, the ``quality`` reward) on a real redis-server
started here: what the client yields is exactly what the worker stored.
"""

from __future__ import annotations

import asyncio

from execgym import Rollout, RolloutLine, Task, Verdict
from execgym.broker import score_rollouts
from execgym.broker.base import Delivery
from execgym.broker.messages import JobMessage, ResultMessage
from execgym.broker.redis_streams import RedisStreamsBroker
from execgym.broker.worker import Worker, WorkerSettings
from execgym.limits import Limits
from execgym.reward import load_spec
from execgym.scoring.results import ScoredRollout
from execgym.testing import RedisServer
from tests.broker.conftest import FAST

SQUARE = Task(
    task_id="t/square",
    prompt="def square(x):\n",
    tests="def check(candidate):\n    assert candidate(3) == 9\n    assert candidate(-2) == 4\n",
    entry_point="square",
    reference="    return x * x\n",
)
COMPLETIONS = ["    return x * x\n", "    return x + x\n", "    return x ** 2\n"]


class Recording(Worker):
    """A worker that keeps each result line it stores, by index."""

    stored: dict[int, dict[str, object]]

    def reward(self, job: JobMessage, scored: ScoredRollout, delivery: Delivery) -> ResultMessage:
        message = super().reward(job, scored, delivery)
        self.stored[job.index] = message.result
        return message


async def test_details_and_reward_breakdown_survive_redis(
    redis_server: RedisServer, bwrap_sandbox: object
) -> None:
    broker = RedisStreamsBroker(redis_server.url, FAST, prefix="fields", block_s=0.2)
    settings = WorkerSettings(concurrency=2, block_s=0.2)
    worker = Recording(broker, bwrap_sandbox, settings, reward=load_spec("quality"))  # type: ignore[arg-type]
    worker.stored = {}
    running = asyncio.create_task(worker.run())
    items = [
        RolloutLine(i, Rollout(task_id=SQUARE.task_id, completion=completion))
        for i, completion in enumerate(COMPLETIONS)
    ]
    try:
        scored = [
            s
            async for s in score_rollouts(
                broker, {SQUARE.task_id: SQUARE}, items, Limits(wall_time_s=10), ordered=True
            )
        ]
    finally:
        worker.stop()
        await running
        await broker.aclose()
    assert [s.verdict for s in scored] == [Verdict.PASSED, Verdict.FAILED, Verdict.PASSED]
    for result in scored:
        line = result.to_json()
        assert line == worker.stored[result.index]  # nothing lost on the way
        assert line["details"]["state"] == "fresh"  # the judge's own facts
        breakdown = line["reward_breakdown"]
        assert breakdown["spec"] == "quality"
        assert "correctness" in breakdown["components"]
        assert breakdown["total"] == result.reward
    assert scored[1].reward == 0.0
    assert scored[0].judgement is not None
    assert "reference_cpu_s" in scored[0].judgement.details  # quality measures efficiency
