"""A job keeps only what its response shows of each result, encoded once (issue 23)."""

from __future__ import annotations

import gc

from execgym.limits import Limits
from execgym.scoring import TAIL_BYTES, ScoredRollout
from execgym.server.capacity import Capacity
from execgym.server.jobs import Batch, EmbeddedJobRunner
from execgym.tasks.loaders import RolloutLine
from execgym.tasks.models import Rollout, Task
from execgym.testing import FakeCall, FakeSandbox, fake_result, harness_pass
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
        line = result.to_json()
        assert (line["stdout_tail"], line["stderr_tail"]) == ("o" * TAIL_BYTES, "e" * TAIL_BYTES)
        assert len(result.line) < 5 * TAIL_BYTES  # the tails, an excerpt in the message, fields
    await runner.aclose()


def _scored_rollouts_alive() -> set[int]:
    gc.collect()
    # type(), not isinstance(): isinstance reads __class__, which warns (an error here)
    # on some objects of other libraries (torch.distributed.reduce_op)
    return {id(o) for o in gc.get_objects() if type(o) is ScoredRollout}


async def test_a_finished_job_holds_its_results_lines_not_the_result_objects() -> None:
    # Other tests of the same session may keep results alive: count only this job's.
    before = _scored_rollouts_alive()
    runner = EmbeddedJobRunner(
        FakeSandbox(harness_pass), Capacity(limit=50, workers=2), workers=2, ttl_s=60
    )
    items = [RolloutLine(i, Rollout(task_id="t/1", completion="x")) for i in range(30)]
    job_id = await runner.submit(Batch({"t/1": TASK}, items, Limits()))
    view = await runner.wait(job_id)
    assert view is not None
    assert view.state == "done"
    del view
    # The old job kept each ScoredRollout (its judgement, its run: about 3.3 KB of
    # objects each); it keeps each one's encoded line (about 1.2 KB).
    held = _scored_rollouts_alive() - before
    assert held == set()
    again = await runner.get(job_id)
    assert again is not None
    assert [r.index for r in again.results] == list(range(30))
    assert {r.to_json()["verdict"] for r in again.results} == {"passed"}
    await runner.aclose()
