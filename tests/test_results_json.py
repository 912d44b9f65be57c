"""A result survives its JSON form: ``ScoredRollout.from_json(r.to_json())``.

Every kind of result a run writes (passed, failed, tampered, every masked verdict,
invalid input, quarantined, calibrated, with a reward breakdown, with judge details)
comes back equal, and its JSON is a fixed point; the reader is the one the broker
uses (``ResultMessage.scored``), which used to drop ``details`` and
``reward_breakdown``.
"""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from execgym import Rollout, RolloutLine, Scorer, Task, Verdict
from execgym.broker.messages import JobMessage, ResultMessage
from execgym.judges.assert_tests import START_MARKER, job_nonce
from execgym.judges.base import ErrorDetail, Judgement
from execgym.reward import load_spec
from execgym.reward.combine import ComponentScore, RewardBreakdown
from execgym.sandbox import RunResult, Status
from execgym.scoring.results import TAIL_BYTES, ScoredRollout, invalid_result
from execgym.testing import FakeCall, FakeSandbox, fake_result

TASK = Task(
    task_id="t/1",
    prompt="def f():\n",
    tests="def check(c):\n    assert c() == 1\n",
    entry_point="f",
)
ENFORCEMENT = {"memory_bytes": "cgroup-v2", "cpu_time_s": "rlimit (per process)"}
LIMITS = {"wall_time_s": 5.0, "cpu_time_s": 5.0, "memory_bytes": 268435456}
BREAKDOWN = RewardBreakdown(
    0.8125,
    "quality",
    (
        ComponentScore("correctness", 1.0, 0.7, "passed"),
        ComponentScore("efficiency", None, 0.1, "no reference"),
        ComponentScore("static", 0.625, 0.2, "3 ruff findings"),
    ),
    "0.7*1 + 0.2*0.625 over 0.9",
)


def run(status: Status = Status.OK, **fields: object) -> RunResult:
    """A run the JSON keeps whole: output within the tail, no report, no message."""
    base = {
        "stdout": b"out\n",
        "stderr": b"Traceback ...\nAssertionError\n",
        "wall_time_s": 0.0123,
        "cpu_time_s": 0.0101,
        "processes_started": 2,
        "bytes_written": 4,
        "enforcement": ENFORCEMENT,
        "isolation": "bwrap",
    }
    return fake_result(status, **{**base, **fields})


def scored(verdict: Verdict, reward: float | None, **fields: object) -> ScoredRollout:
    judgement = fields.pop("judgement", Judgement(verdict, run(), message="why"))
    base = {
        "index": 3,
        "task_id": "t/1",
        "rollout_id": "r-3",
        "verdict": verdict,
        "reward": reward,
        "judgement": judgement,
        "isolation": "bwrap",
        "attempts": 1,
        "message": "why",
        "limits": LIMITS,
    }
    return ScoredRollout(**{**base, **fields})


FAILED = ErrorDetail("AssertionError", "assert f(1) == 2", "Traceback ...\nAssertionError\n")
RESULTS = {
    "passed": scored(Verdict.PASSED, 1.0),
    "failed": scored(
        Verdict.FAILED, 0.0, judgement=Judgement(Verdict.FAILED, run(), FAILED, "why")
    ),
    "tampered": scored(
        Verdict.TAMPERED,
        0.0,
        judgement=Judgement(
            Verdict.TAMPERED, run(), ErrorDetail("Tampered", "forged"), "why", {"hack": "exit"}
        ),
    ),
    "timeout": scored(
        Verdict.TIMEOUT,
        0.0,
        judgement=Judgement(
            Verdict.TIMEOUT,
            run(Status.TIME_LIMIT, exit_code=None, signal=9, limit_hit="wall_time_s"),
            message="why",
        ),
    ),
    "masked sandbox_error": scored(
        Verdict.SANDBOX_ERROR,
        None,
        attempts=2,
        judgement=Judgement(
            Verdict.SANDBOX_ERROR,
            run(Status.SANDBOX_ERROR, exit_code=None, peak_memory_bytes=None),
            message="why",
            details={"infrastructure": "the harness never started"},
        ),
    ),
    "masked without a run": scored(
        Verdict.LANGUAGE_UNAVAILABLE,
        None,
        limits=None,
        judgement=Judgement(Verdict.LANGUAGE_UNAVAILABLE, message="why"),
    ),
    "quarantined": scored(
        Verdict.QUARANTINED,
        None,
        attempts=0,
        limits=None,
        judgement=Judgement(Verdict.QUARANTINED, message="why"),
    ),
    "invalid": invalid_result(7, "nope", "nope#7", "unknown task_id 'nope'", "bwrap"),
    "with breakdown": scored(Verdict.PASSED, 0.8125, reward_breakdown=BREAKDOWN),
    "masked breakdown": scored(
        Verdict.SANDBOX_ERROR,
        None,
        judgement=Judgement(Verdict.SANDBOX_ERROR, message="why"),
        reward_breakdown=RewardBreakdown(None, "quality", (), "masked: sandbox_error"),
    ),
    "with details": scored(
        Verdict.PASSED,
        1.0,
        judgement=Judgement(
            Verdict.PASSED,
            run(),
            message="why",
            details={"state": "fresh", "cases_passed": 3, "cases_total": 3, "cpu_s": 0.01},
        ),
    ),
    "calibrated": scored(
        Verdict.PASSED, 1.0, calibration={"wall_time_s": 1.5, "cpu_time_s": 1.5, "runs": 3}
    ),
}


def status_of(result: ScoredRollout) -> str | None:
    run = result.judgement.run if result.judgement else None
    return run.status.value if run else None


@pytest.mark.parametrize("kind", RESULTS)
def test_every_kind_of_result_survives_its_json(kind: str) -> None:
    result = RESULTS[kind]
    line = json.loads(json.dumps(result.to_json()))  # as it travels
    back = ScoredRollout.from_json(line, status_of(result))
    assert back == result
    assert back.to_json() == line


@pytest.mark.parametrize("kind", RESULTS)
def test_the_brokers_reader_keeps_every_field(kind: str) -> None:
    result = RESULTS[kind]
    job = JobMessage(
        job_id="b/3",
        batch_id="b",
        index=3,
        task=TASK,
        rollout=Rollout(task_id="t/1", completion="    return 1\n"),
    )
    message = ResultMessage.from_json(ResultMessage.of(job, result).to_json())
    assert message.scored() == result


def test_output_past_the_tail_comes_back_as_the_tail_the_line_shows() -> None:
    """Long, undecodable output: the JSON is a fixed point, the output its kept tail."""
    rng = random.Random(19)  # noqa: S311 (test data, not a secret)
    for _ in range(200):
        size = rng.choice([0, 1, TAIL_BYTES - 1, TAIL_BYTES, TAIL_BYTES + 1, 3 * TAIL_BYTES])
        alphabet = [b"a", b"\n", b"\xff", b"\xe2\x82", "é".encode(), "\ufffd".encode(), b"\x80"]
        stdout = b"".join(rng.choice(alphabet) for _ in range(size))[:size]
        judgement = Judgement(Verdict.FAILED, run(stdout=stdout, stderr=stdout[::-1]))
        result = scored(Verdict.FAILED, 0.0, judgement=judgement)
        line = result.to_json()
        back = ScoredRollout.from_json(line, "ok")
        assert back.to_json() == line
        assert back.judgement is not None
        assert back.judgement.run is not None
        assert len(back.judgement.run.stdout) <= TAIL_BYTES


def passing(call: FakeCall) -> RunResult:
    nonce = job_nonce(call.stdin)
    return fake_result(report=START_MARKER + nonce + b'\n{"verdict": "passed"}\n')


def test_a_scored_rollout_with_a_reward_spec_survives_its_json() -> None:
    """A result as the scorer makes it, quality preset and all, not one built by hand."""
    scorer = Scorer({"t/1": TASK}, FakeSandbox(passing), reward=load_spec("quality"))
    item = RolloutLine(0, Rollout(task_id="t/1", completion="    return 1\n"))
    result = asyncio.run(scorer.score_one(item))
    assert result.reward_breakdown is not None
    line = json.loads(json.dumps(result.to_json()))
    assert line["details"]
    assert "reward_breakdown" in line
    assert ScoredRollout.from_json(line, status_of(result)).to_json() == line


def test_a_line_missing_a_field_is_a_clear_error() -> None:
    line = RESULTS["passed"].to_json()
    del line["details"]
    with pytest.raises(ValueError, match="lacks the field 'details'"):
        ScoredRollout.from_json(line, "ok")
    line = RESULTS["passed"].to_json()
    line["error"] = "text"
    with pytest.raises(ValueError, match="wrong kind"):
        ScoredRollout.from_json(line, "ok")
