from __future__ import annotations

from math import comb

import pytest

from execgym import ScoredRollout, Verdict, pass_at_k, summarize


@pytest.mark.parametrize(
    ("n", "c", "k"), [(10, 3, 1), (10, 3, 5), (200, 17, 10), (5, 0, 2), (5, 5, 5), (20, 19, 10)]
)
def test_pass_at_k_matches_the_closed_form(n: int, c: int, k: int) -> None:
    expected = 1 - comb(n - c, k) / comb(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_rejects_impossible_counts() -> None:
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(3, 1, 4)


def _result(task: str, verdict: Verdict, index: int = 0) -> ScoredRollout:
    reward = None if verdict.is_masked else float(verdict is Verdict.PASSED)
    return ScoredRollout(index, task, f"{task}#{index}", verdict, reward, None, "fake")


def test_summary_counts_masks_and_pass_at_k() -> None:
    results = [
        _result("a", Verdict.PASSED),
        _result("a", Verdict.FAILED),
        _result("b", Verdict.FAILED),
        _result("b", Verdict.FAILED),
        _result("b", Verdict.SANDBOX_ERROR),
        _result("", Verdict.INVALID),
    ]
    summary = summarize(results, elapsed_s=2.0, ks=(1, 2, 10))
    assert summary.counts == {"passed": 1, "failed": 3, "sandbox_error": 1, "invalid": 1}
    assert summary.masked == 2
    assert summary.tasks == 2
    assert summary.pass_at_k == {1: pytest.approx(0.25), 2: pytest.approx(0.5)}
    assert summary.rollouts_per_s == 3.0
    assert "pass@1: 0.2500" in summary.render()


def test_summary_says_when_no_requested_k_is_reachable() -> None:
    results = [_result("a", Verdict.PASSED, index=i) for i in range(5)]
    summary = summarize(results, elapsed_s=1.0, ks=(100,))
    assert summary.pass_at_k == {1: 1.0}
    assert summary.unreached_ks == (100,)
    text = summary.render()
    assert "5 rollouts, 1 task scored" in text
    assert "pass@1: 1.0000" in text
    assert "pass@100 not computed: a task has only 5 rollouts" in text
