"""A job keeps only what its response shows of each result's output (issue 23)."""

from __future__ import annotations

from execgym.limits import Limits
from execgym.scoring import TAIL_BYTES
from execgym.server.capacity import Capacity
from execgym.server.jobs import Batch, EmbeddedJobRunner
from execgym.tasks.loaders import RolloutLine
from execgym.tasks.models import Rollout, Task
from execgym.testing import FakeCall, FakeSandbox, fake_result
from tests.conftest import ONE_TASK

TASK = Task.model_validate(ONE_TASK)


def chatty(call: FakeCall) -> object:
    # A failing run that printed its full output limit on both streams.
    return fake_result(stdout=b"o" * (1 << 20), stderr=b"e" * (1 << 20), exit_code=1)


async def test_a_finished_job_holds_the_tail_of_each_output_not_all_of_it() -> None:
    runner = EmbeddedJobRunner(
        FakeSandbox(chatty), Capacity(limit=50, workers=2), workers=2, ttl_s=60
    )
    items = [RolloutLine(i, Rollout(task_id="t/1", completion="x")) for i in range(20)]
    job_id = await runner.submit(Batch({"t/1": TASK}, items, Limits()))
    view = await runner.wait(job_id)
    assert view is not None
    assert [r.index for r in view.results] == list(range(20))
    for result in view.results:
        run = result.judgement.run
        assert (len(run.stdout), len(run.stderr)) == (TAIL_BYTES, TAIL_BYTES)
        assert result.to_json()["stdout_tail"] == "o" * TAIL_BYTES
    await runner.aclose()
