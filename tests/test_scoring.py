"""The scorer with scripted sandboxes: retries, masking, invalid input, ordering."""

from __future__ import annotations

import asyncio

import pytest

from execgym import Limits, Rollout, RolloutLine, ScoredRollout, Scorer, Task, Verdict
from execgym.errors import SandboxSetupFailed
from execgym.judges.assert_tests import START_MARKER, _parse_report, job_nonce
from execgym.sandbox import RunRequest, RunResult, Status
from execgym.tasks import LineProblem
from execgym.testing import FakeCall, FakeSandbox, fake_result

TASK = Task(
    task_id="t/1",
    prompt="def f():\n",
    tests="def check(c):\n    assert c() == 1\n",
    entry_point="f",
)


def passing(call: FakeCall) -> object:
    nonce = job_nonce(call.stdin)
    return fake_result(report=START_MARKER + nonce + b'\n{"verdict": "passed"}\n')


def line(
    index: int,
    task_id: str = "t/1",
    completion: str = "    return 1\n",
    rollout_id: str | None = None,
) -> RolloutLine:
    return RolloutLine(
        index, Rollout(task_id=task_id, completion=completion, rollout_id=rollout_id)
    )


async def test_pass_gets_reward_one_and_keeps_ids() -> None:
    scorer = Scorer({"t/1": TASK}, FakeSandbox(passing))
    result = await scorer.score_one(line(7, rollout_id="mine"))
    assert (result.verdict, result.reward, result.index, result.rollout_id) == (
        Verdict.PASSED,
        1.0,
        7,
        "mine",
    )
    generated = await scorer.score_one(line(8))
    assert generated.rollout_id == "t/1#8"


async def test_sandbox_error_is_retried_once_then_masked() -> None:
    box = FakeSandbox([fake_result(Status.SANDBOX_ERROR, message="bwrap crashed")])
    result = await Scorer({"t/1": TASK}, box).score_one(line(0))
    assert result.verdict is Verdict.SANDBOX_ERROR
    assert result.reward is None
    assert result.attempts == 2
    assert len(box.calls) == 2


async def test_a_deterministic_harness_refusal_is_masked_once_not_retried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A harness refusal a retry would repeat word for word (``UnsupportedArgument``:
    the tests pass what the harness cannot carry) is masked at once and logged once; it
    was run and logged twice. The report is the harness's own shape (``fail`` in
    ``judges/_untrusted.py`` before the fork-per-call judges stopped refusing callables)."""
    refusal = (
        b'{"verdict": "harness_error", "type": "UnsupportedArgument", "message": "the tests '
        b"pass an argument that is not plain data: <class 'function'>\"}"
    )
    box = FakeSandbox(
        lambda call: fake_result(report=START_MARKER + job_nonce(call.stdin) + b"\n" + refusal)
    )
    with caplog.at_level("WARNING", logger="execgym.scoring"):
        result = await Scorer({"t/1": TASK}, box).score_one(line(0))
    assert result.verdict is Verdict.SANDBOX_ERROR
    assert result.reward is None
    assert "UnsupportedArgument" in result.message
    assert result.attempts == 1
    assert len(box.calls) == 1
    warnings = [r for r in caplog.records if "sandbox_error" in r.getMessage()]
    assert len(warnings) == 1
    assert "not retried" in warnings[0].getMessage()


async def test_sandbox_error_then_success_counts() -> None:
    outcomes = iter([fake_result(Status.SANDBOX_ERROR)])
    box = FakeSandbox(lambda call: next(outcomes, None) or passing(call))
    result = await Scorer({"t/1": TASK}, box).score_one(line(0))
    assert (result.verdict, result.reward, result.attempts) == (Verdict.PASSED, 1.0, 2)


async def test_unknown_task_and_bad_lines_are_invalid_with_null_reward() -> None:
    scorer = Scorer({"t/1": TASK}, FakeSandbox(passing))
    unknown = await scorer.score_one(line(0, task_id="nope"))
    assert unknown.verdict is Verdict.INVALID
    assert unknown.reward is None
    assert "unknown task_id 'nope'" in unknown.message
    bad = await scorer.score_one(LineProblem("r.jsonl", 3, 2, "not valid JSON"))
    assert bad.verdict is Verdict.INVALID
    assert bad.index == 2
    assert "r.jsonl:3" in bad.message


async def test_a_crashing_judge_is_masked_not_zero(monkeypatch) -> None:
    scorer = Scorer({"t/1": TASK}, FakeSandbox(passing))

    async def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("bug in execgym")

    monkeypatch.setattr(scorer.judges.judge_for(TASK), "judge", boom)
    result = await scorer.score_one(line(0))
    assert result.verdict is Verdict.SANDBOX_ERROR
    assert result.reward is None


async def test_score_streams_results_and_returns_them_in_input_order() -> None:
    # Finishing order 1, 2, 0: each run waits until the result it follows was handed
    # on (sleeps of 10-30 ms were reordered on a loaded machine).
    handed = {index: asyncio.Event() for index in range(3)}
    waits_for = {0: 2, 2: 1}

    async def slow_run(request: RunRequest) -> RunResult:
        stdin = request.stdin
        index = int(stdin.split(b"return ")[1].split(b"\n")[0])
        if index in waits_for:
            await handed[waits_for[index]].wait()
        nonce = job_nonce(stdin)
        return fake_result(report=START_MARKER + nonce + b'\n{"verdict": "passed"}\n')

    box = FakeSandbox(passing)
    box.run = slow_run  # type: ignore[method-assign]
    seen: list[int] = []

    def on_result(result: ScoredRollout) -> None:
        seen.append(result.index)
        handed[result.index].set()

    items = [line(i, completion=f"    return {i}\n") for i in range(3)]
    results = await Scorer({"t/1": TASK}, box).score(items, workers=3, on_result=on_result)
    assert seen == [1, 2, 0]
    assert [r.index for r in results] == [0, 1, 2]


def test_to_json_has_the_documented_fields() -> None:
    result = asyncio.run(Scorer({"t/1": TASK}, FakeSandbox(passing)).score_one(line(0)))
    record = result.to_json()
    for name in (
        "task_id",
        "rollout_id",
        "index",
        "verdict",
        "reward",
        "wall_time_s",
        "cpu_time_s",
        "peak_memory_bytes",
        "stdout_tail",
        "stderr_tail",
        "error",
        "isolation",
    ):
        assert name in record
    assert record["isolation"] == "fake"


def test_parse_report_takes_the_last_tagged_record() -> None:
    nonce = "b" * 32
    tag = nonce.encode() + b"\n"
    report = tag + b'{"verdict": "failed"}\n' + tag + b'{"verdict": "x"}\n'
    assert _parse_report(report, nonce) is None
    passed = b"junk" + tag + b'{"verdict": "passed"}\n'
    assert _parse_report(passed, nonce) == {"verdict": "passed"}


async def test_score_takes_plain_rollouts_numbered_by_position() -> None:
    scorer = Scorer({"t/1": TASK}, FakeSandbox(passing))
    rollouts = [Rollout(task_id="t/1", completion="    return 1\n") for _ in range(3)]
    results = await scorer.score(rollouts, workers=2)
    assert [(r.index, r.rollout_id, r.reward) for r in results] == [
        (0, "t/1#0", 1.0),
        (1, "t/1#1", 1.0),
        (2, "t/1#2", 1.0),
    ]
    mixed = await scorer.score([line(5), Rollout(task_id="t/1", completion="    return 1\n")])
    assert [r.index for r in mixed] == [1, 5]


async def test_score_refuses_a_wrong_item_type_with_a_type_error() -> None:
    scorer = Scorer({"t/1": TASK}, FakeSandbox(passing))
    with pytest.raises(TypeError, match=r"item 1 is a dict; give Rollout objects"):
        await scorer.score([line(0), {"task_id": "t/1", "completion": "x"}])  # type: ignore[list-item]


async def test_self_test_suggests_larger_limits_when_they_are_too_small() -> None:
    box = FakeSandbox([fake_result(Status.TIME_LIMIT, limit_hit="wall_time_s")])
    scorer = Scorer({"t/1": TASK}, box, Limits(wall_time_s=0.001))
    with pytest.raises(SandboxSetupFailed, match="raise them \\(--timeout / --memory"):
        await scorer.self_test()


def _timed_box(delays: dict[int, float], running: list[int] | None = None) -> FakeSandbox:
    """A sandbox where rollout ``i`` (completion ``return i``) takes ``delays[i]`` s."""

    async def slow_run(request: RunRequest) -> RunResult:
        stdin = request.stdin
        index = int(stdin.split(b"return ")[1].split(b"\n")[0])
        if running is not None:
            running.append(index)
        await asyncio.sleep(delays.get(index, 0.0))
        nonce = job_nonce(stdin)
        return fake_result(
            report=START_MARKER + nonce + b'\n{"verdict": "passed"}\n', stdout=b"x" * 10_000
        )

    box = FakeSandbox(passing)
    box.run = slow_run  # type: ignore[method-assign]
    return box


async def test_input_order_hands_results_over_in_input_order_within_a_window() -> None:
    # Rollout 0 is slow: the others finish first but wait for it, and a free sandbox
    # takes no item past the window (3 items taken and not yet handed over).
    started: list[int] = []
    box = _timed_box({0: 0.2}, started)
    seen: list[int] = []
    items = [line(i, completion=f"    return {i}\n") for i in range(8)]

    def on_result(result) -> None:
        seen.append(result.index)

    results = await Scorer({"t/1": TASK}, box).score(
        items, workers=2, on_result=on_result, order="input", window=3, collect=False
    )
    assert results == []
    assert seen == list(range(8))
    # While 0 ran, only 1 and 2 could start; 3 started only once 0 was handed over.
    assert started.index(3) > started.index(2)
    assert started[:3] == [0, 1, 2]


async def test_completion_order_is_the_default_and_unbounded_by_the_window() -> None:
    box = _timed_box({0: 0.2})
    seen: list[int] = []
    items = [line(i, completion=f"    return {i}\n") for i in range(6)]
    await Scorer({"t/1": TASK}, box).score(
        items, workers=2, on_result=lambda r: seen.append(r.index), window=1
    )
    assert seen[-1] == 0
    assert sorted(seen) == list(range(6))


async def test_output_tail_keeps_only_the_end_of_each_result_output() -> None:
    box = _timed_box({})
    held: list = []
    await Scorer({"t/1": TASK}, box).score(
        [line(0)], on_result=held.append, order="input", output_tail=100, collect=False
    )
    (result,) = held
    assert result.judgement.run.stdout == b"x" * 100
    assert result.to_json()["stdout_tail"] == "x" * 100


async def test_a_cancelled_batch_hands_over_the_results_held_for_ordering() -> None:
    box = _timed_box({0: 30.0})
    seen: list[int] = []
    items = [line(i, completion=f"    return {i}\n") for i in range(3)]
    task = asyncio.create_task(
        Scorer({"t/1": TASK}, box).score(
            items, workers=3, on_result=lambda r: seen.append(r.index), order="input"
        )
    )
    await asyncio.sleep(0.1)
    assert seen == []  # 1 and 2 are done, held behind 0
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == [1, 2]


async def test_score_rejects_an_unknown_order() -> None:
    with pytest.raises(ValueError, match="order='random'"):
        await Scorer({"t/1": TASK}, FakeSandbox(passing)).score([], order="random")


async def test_an_async_iterable_is_read_one_item_at_a_time_within_the_window() -> None:
    # A trainer's async generator: read as sandboxes free up, never ahead of the window
    # (the old score_batch refused it: 'async_generator' object is not iterable).
    read = 0
    seen: list[int] = []

    async def rollouts():
        nonlocal read
        for index in range(40):
            read += 1
            await asyncio.sleep(0)
            yield Rollout(task_id="t/1" if index != 7 else "nope", completion="    return 1\n")

    def on_result(result: ScoredRollout) -> None:
        seen.append(result.index)
        ahead.append(read - len(seen))

    ahead: list[int] = []
    results = await Scorer({"t/1": TASK}, FakeSandbox(passing)).score(
        rollouts(), workers=3, on_result=on_result, order="input", window=4
    )
    assert seen == list(range(40))
    assert [r.index for r in results] == list(range(40))
    assert results[7].verdict is Verdict.INVALID
    assert max(ahead) <= 4, ahead

    async def bad():
        for item in (Rollout(task_id="t/1", completion=""),) * 2 + ("oops",):
            yield item

    with pytest.raises(TypeError, match="item 2 is a str"):
        await Scorer({"t/1": TASK}, FakeSandbox(passing)).score(bad())
