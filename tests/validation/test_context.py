"""The run context and the mutation check's bookkeeping, with fakes (no sandbox)."""

from __future__ import annotations

from execgym.judges.base import Judge, Judgement, Verdict
from execgym.limits import Limits
from execgym.sandbox.base import Status
from execgym.testing import FakeSandbox, fake_result
from execgym.validation import Context, Outcome, Thresholds, mutation
from tests.validation import planted


class ScriptedJudge:
    """Passes every mutant whose program contains `marker`; records the limits used.

    A :class:`~execgym.judges.base.Judge` (the protocol checks it below)."""

    name = "scripted"

    def __init__(self, marker: str, masked: str) -> None:
        self.marker, self.masked = marker, masked
        self.limits: list[Limits] = []

    async def judge(self, task, completion, sandbox, limits, *, files=None) -> Judgement:
        self.limits.append(limits)
        if self.masked in completion:
            return Judgement(Verdict.SANDBOX_ERROR, fake_result(Status.SANDBOX_ERROR))
        verdict = Verdict.PASSED if self.marker in completion else Verdict.FAILED
        return Judgement(verdict, fake_result(wall_time_s=0.01))


def test_the_scripted_judge_is_a_judge() -> None:
    assert isinstance(ScriptedJudge("", ""), Judge)


async def test_context_retries_a_sandbox_error_once() -> None:
    box = FakeSandbox([fake_result(Status.SANDBOX_ERROR)])
    ctx = Context(box)
    judgement = await ctx.judge_completion(planted.GOOD, "    return 1\n", Limits())
    assert judgement.verdict is Verdict.SANDBOX_ERROR
    assert len(box.calls) == 2
    assert ctx.runs == 2


async def test_mutation_score_leaves_masked_runs_out_and_limits_mutants() -> None:
    # survivors: mutants that keep `b - a`; masked: those with `a + b`
    judge = ScriptedJudge(marker="return b - a", masked="a + b")
    box = FakeSandbox([fake_result(stdout=b"\n[]\n")])  # the equivalence probe: no answer
    ctx = Context(box, judge=judge, thresholds=Thresholds(min_mutant_wall_time_s=1.5))
    reference_runs = [Judgement(Verdict.PASSED, fake_result(wall_time_s=0.05))]
    found = await mutation.check(planted.GOOD, ctx, reference_runs)
    details = found.details
    masked = details["mutants"] - details["judged"]
    assert masked >= 1
    survivors = details["judged"] - details["killed"]
    assert survivors == len(details["survivors"]) >= 1
    assert details["score"] == round(details["killed"] / details["judged"], 4)
    assert found.outcome is (Outcome.PASS if details["score"] >= 0.75 else Outcome.FAIL)
    assert {lim.wall_time_s for lim in judge.limits} == {1.5}  # max(1.5, 20 x 0.05)
