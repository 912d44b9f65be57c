"""The leak and scaling reward components, and the masking rule for diagnostics.

A diagnostic the rollout's code broke scores 0, never ``None``; only one the host
provably failed, or one not run, is left out of the weights (execgym.judges.masking).
"""

from __future__ import annotations

import pytest

from execgym.diagnostics import Diagnostics, Leak, Section, Where
from execgym.judges.base import Judgement, Verdict
from execgym.reward import evaluate
from execgym.reward.evaluate import leak_score, scaling_score
from execgym.reward.spec import PRESETS, Scaling
from execgym.reward.spec import Leak as LeakSpec
from execgym.tasks.models import Task

LEAK = Leak(
    "memory", Where("solution.py", 4, "f", "_log.append(x)"), "56 B per call", 56.0, 1960.0, "bytes"
)
FIT = {"class": "O(n)", "rank": 2, "slope": 1.0, "points": [[1, 1.0]]}
TASK = Task(
    task_id="t", prompt="def f(x):\n", entry_point="f", tests="def check(c):\n    assert c(1)\n"
)


def judged(**sections: Section) -> Judgement:
    return Judgement(Verdict.PASSED, diagnostics=Diagnostics(**sections))


def test_no_leak_is_one_a_leak_is_zero() -> None:
    clean = judged(leaks=Section("measured", data={"found": [], "calls": 70}))
    leaky = judged(leaks=Section("measured", data={"found": [LEAK.to_json()], "calls": 70}))
    assert leak_score(clean, LeakSpec()).score == 1.0
    measured = leak_score(leaky, LeakSpec())
    assert measured.score == 0.0
    assert "line 4" in measured.detail


def test_broken_by_the_code_is_zero_never_none() -> None:
    broken = Section("failed", "the program raised SystemExit", "rollout")
    assert leak_score(judged(leaks=broken), LeakSpec()).score == 0.0
    assert scaling_score(judged(complexity=broken), Scaling()).score == 0.0


@pytest.mark.parametrize(
    "section",
    [None, Section("not_applicable", "no sizes"), Section("failed", "bwrap failed", "host")],
)
def test_not_run_or_ours_is_left_out(section: Section | None) -> None:
    judgement = judged(leaks=section) if section else Judgement(Verdict.PASSED)
    assert leak_score(judgement, LeakSpec()).score is None


@pytest.mark.parametrize(("mine", "score"), [(0, 1.0), (2, 1.0), (3, 0.5), (4, 0.0), (5, 0.0)])
def test_scaling_formula(mine: int, score: float) -> None:
    data = {"model": {**FIT, "rank": mine}, "reference": FIT}
    assert (
        scaling_score(judged(complexity=Section("measured", data=data)), Scaling()).score == score
    )


async def test_quality_without_diagnostics_scores_as_before() -> None:
    spec = PRESETS["quality"]
    assert {c.kind for c in spec.components} >= {"leak", "scaling", "efficiency"}
    for verdict in (Verdict.PASSED, Verdict.FAILED):
        breakdown = await evaluate(spec, TASK, "    return 1\n", Judgement(verdict))
        parts = breakdown.to_json()["components"]
        assert parts["leak"]["score"] is None
        assert parts["scaling"]["score"] is None
        weights = sum(c["weight"] for c in parts.values() if c["score"] is not None)
        assert weights == pytest.approx(0.6 + 0.1 + 0.1 + 0.1 + 0.1 * (verdict is Verdict.FAILED))


async def test_quality_with_a_leak() -> None:
    leaky = judged(leaks=Section("measured", data={"found": [LEAK.to_json()], "calls": 70}))
    clean = judged(leaks=Section("measured", data={"found": [], "calls": 70}))
    low = await evaluate(PRESETS["quality"], TASK, "    return 1\n", leaky)
    high = await evaluate(PRESETS["quality"], TASK, "    return 1\n", clean)
    assert low.total is not None
    assert high.total is not None
    # weights: correctness 0.6, static, complexity, security 0.1 each, leak 0.1 (no
    # reference: efficiency and scaling are left out)
    assert high.total - low.total == pytest.approx(0.1 / 1.0, abs=1e-6)


def test_diagnostics_json_round_trip() -> None:
    original = Diagnostics(
        leaks=Section(
            "measured", "1 leak", tool="tracemalloc", data={"found": [LEAK.to_json()], "calls": 70}
        ),
        complexity=Section("failed", "raised", "rollout"),
        seconds=1.25,
    )
    data = original.to_json()
    assert set(data) == {"leaks", "complexity", "seconds"}
    assert Diagnostics.from_json(data) == original
    assert Diagnostics.from_json(data).leak_list == [LEAK]
