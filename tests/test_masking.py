"""The masking principle as code (execgym.judges.masking): one place decides which results carry
no reward, and which failures count toward a circuit breaker."""

from __future__ import annotations

from execgym.judges.base import Judgement, Verdict, never_started
from execgym.judges.masking import Fault, counts_toward_breaker, fault_of, is_masked
from execgym.reward import binary_reward
from execgym.sandbox.base import Status
from execgym.testing import fake_result

OURS = {
    Verdict.SANDBOX_ERROR: Fault.HOST,
    Verdict.LANGUAGE_UNAVAILABLE: Fault.TOOLCHAIN,
    Verdict.INVALID: Fault.TASK,
    Verdict.QUARANTINED: Fault.HOST,
}


def test_only_our_verdicts_are_masked_and_every_other_one_has_a_reward() -> None:
    for verdict in Verdict:
        assert fault_of(verdict) is OURS.get(verdict, Fault.ROLLOUT)
        assert verdict.is_masked is is_masked(verdict) is (verdict in OURS)
        assert (binary_reward(verdict) is None) is (verdict in OURS)


def test_only_a_run_that_proves_the_infrastructure_failed_counts_toward_a_breaker() -> None:
    setup_failed = fake_result(Status.SANDBOX_ERROR, exit_code=None, message="bwrap: EPERM")
    assert counts_toward_breaker(Judgement(Verdict.SANDBOX_ERROR, setup_failed))
    unstarted = never_started(fake_result(Status.RUNTIME_ERROR, exit_code=1), "harness")
    assert unstarted is not None
    assert counts_toward_breaker(unstarted)
    ran = fake_result(Status.OK, exit_code=0)
    # a checker crashing on the rollout's output: masked or not, the rollout reached it
    assert not counts_toward_breaker(Judgement(Verdict.SANDBOX_ERROR, ran, message="checker"))
    # an exception of execgym's host code: no run proves it was not the rollout's data
    assert not counts_toward_breaker(Judgement(Verdict.SANDBOX_ERROR, message="internal"))
    for verdict in set(Verdict) - {Verdict.SANDBOX_ERROR}:
        assert not counts_toward_breaker(Judgement(verdict, setup_failed))
