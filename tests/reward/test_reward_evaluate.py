"""Combining components: formula, range, gating, tampering, masking; each tool's score."""

from __future__ import annotations

import math

import pytest

from execgym import Task, Verdict
from execgym.judges.base import Judgement
from execgym.reward import (
    PRESETS,
    Complexity,
    ComponentScore,
    Correctness,
    Efficiency,
    Penalty,
    RewardSpec,
    Security,
    Static,
    combine,
    evaluate,
)
from execgym.reward.static import complexity_score, security_score, static_score

TASK = Task(
    task_id="t/add",
    prompt='def add(a, b):\n    """Return a + b."""\n',
    tests="def check(candidate):\n    assert candidate(2, 3) == 5\n",
    entry_point="add",
    reference="    return a + b\n",
)
GOOD = "    return a + b\n"
MEASURED = {
    "cpu_s": 0.010,
    "maxrss_kb": 10_000,
    "reference_cpu_s": 0.005,
    "reference_maxrss_kb": 10_000,
    "reference_verdict": "passed",
}


def judged(verdict: Verdict, **details: object) -> Judgement:
    return Judgement(verdict, details=dict(details))


async def test_binary_and_fraction_presets() -> None:
    passed = await evaluate(PRESETS["binary"], TASK, GOOD, judged(Verdict.PASSED))
    assert passed.total == 1.0
    failed = judged(Verdict.FAILED, cases_passed=2, cases_total=3)
    assert (await evaluate(PRESETS["binary"], TASK, GOOD, failed)).total == 0.0
    fraction = await evaluate(PRESETS["fraction"], TASK, GOOD, failed)
    assert fraction.total == pytest.approx(2 / 3)
    assert fraction.components[0].detail == "2 of 3 cases passed"


async def test_quality_gives_a_breakdown_and_an_explanation() -> None:
    result = await evaluate(PRESETS["quality"], TASK, GOOD, judged(Verdict.PASSED, **MEASURED))
    kinds = [c.kind for c in result.components]
    assert kinds == [
        "correctness", "static", "complexity", "security", "efficiency", "leak", "scaling",
    ]  # fmt: skip
    efficiency = result.components[4]
    assert efficiency.score == pytest.approx(0.5 * 0.5 + 0.5 * 1.0)
    assert "CPU 10.0 ms vs reference 5.0 ms" in efficiency.detail
    assert 0.0 <= (result.total or 0) <= 1.0
    assert result.explanation.startswith(f"{result.total:.3f} = (0.6*correctness 1.00")
    as_json = result.to_json()
    assert set(as_json["components"]) == set(kinds)


async def test_gate_gives_nothing_for_clean_but_wrong_code() -> None:
    failed = judged(Verdict.FAILED, cases_passed=1, cases_total=2, **MEASURED)
    result = await evaluate(PRESETS["quality"], TASK, "    return a - b\n", failed)
    assert result.total == pytest.approx(0.6 * 0.5 / 1.0)
    # leak and scaling were not diagnosed: left out, gated or not (docs/diagnostics.md)
    assert all(c.score == 0.0 for c in result.components[1:5])
    assert all(c.score is None for c in result.components[5:])
    assert "gated" in result.components[1].detail


async def test_tampered_is_zero_and_masked_is_none() -> None:
    tampered = judged(Verdict.TAMPERED, hack="non-plain result", cases_passed=1, cases_total=1)
    result = await evaluate(PRESETS["quality"], TASK, GOOD, tampered)
    assert result.total == 0.0
    assert "non-plain result" in result.explanation
    for verdict in (Verdict.SANDBOX_ERROR, Verdict.INVALID):
        assert (await evaluate(PRESETS["quality"], TASK, GOOD, judged(verdict))).total is None


async def test_efficiency_without_a_reference_is_left_out() -> None:
    spec = RewardSpec(components=(Correctness(weight=0.5), Efficiency(weight=0.5)))
    result = await evaluate(spec, TASK, GOOD, judged(Verdict.PASSED))
    assert result.total == 1.0
    assert result.components[1].score is None
    assert "not applicable: efficiency" in result.explanation


async def test_length_penalty_and_user_hook() -> None:
    long = GOOD + "    # " + "x" * 200 + "\n"
    spec = RewardSpec(components=(Correctness(), Penalty(max_chars=100)))
    assert (await evaluate(spec, TASK, long, judged(Verdict.PASSED))).total == 0.0
    assert (await evaluate(spec, TASK, GOOD, judged(Verdict.PASSED))).total == 1.0
    seen: list[tuple[str, str]] = []

    def no_fences(completion: str, task: Task) -> float:
        seen.append((completion, task.task_id))
        return 0.5 if "```" in completion else 0.0

    hooked = RewardSpec(components=(Correctness(), Penalty(function=no_fences, weight=0.5)))
    result = await evaluate(hooked, TASK, "```\n" + GOOD, judged(Verdict.PASSED))
    assert result.total == pytest.approx(1 - 0.5 * 0.5)
    assert seen == [("```\n" + GOOD, "t/add")]


def test_combine_stays_in_range() -> None:
    for scores in ([0.0, 1.0], [1.0, 1.0], [0.3, 0.9], [0.0, 0.0]):
        parts = [
            ComponentScore(f"c{i}", s, w)
            for i, (s, w) in enumerate(zip(scores, [3, 1], strict=True))
        ]
        parts.append(ComponentScore("penalty", 0.4, 1.0))
        total = combine("x", parts, penalties=frozenset({"penalty"})).total
        expected = (3 * scores[0] + scores[1]) / 4 * 0.6
        assert total is not None
        assert math.isclose(total, expected)
        assert 0.0 <= total <= 1.0


def test_static_counts_findings_per_line_and_syntax() -> None:
    clean = static_score("def f(x):\n    return x + 1\n", Static())
    assert clean.score == 1.0
    messy = static_score(
        "import os, sys\ndef f(x):\n    if x == None:\n        return 1\n", Static()
    )
    assert messy.score == 0.0  # 3 findings in 4 lines
    assert "E711" in messy.detail
    assert static_score("def f(:\n", Static()).score == 0.0
    prompt_only = static_score("import os\ndef f(x):\n    return x\n", Static(), first_line=2)
    assert prompt_only.score == 1.0  # the unused import is the prompt's, not the model's


def test_complexity_prefers_simple_code() -> None:
    simple = complexity_score("def f(x):\n    return x\n", Complexity())
    branches = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(25))
    tangled = complexity_score("def f(x):\n" + branches + "    return -1\n", Complexity())
    assert simple.score is not None
    assert tangled.score is not None
    assert simple.score > tangled.score
    assert "complexity 26.0" in tangled.detail


def test_security_weights_by_severity() -> None:
    assert security_score("def f(x):\n    assert x\n    return x\n", Security()).score == 1.0
    risky = security_score(
        "import subprocess\ndef f(x):\n    return subprocess.call(x, shell=True)\n", Security()
    )
    assert risky.score == pytest.approx(1 - (1 + 9) / 10)  # B404 low, B602 high
    assert "B602" in risky.detail


# Issue 18, kind 4: the same sloppy code padded with comments scored higher (static 0 to
# 0.91: findings were divided by non-blank lines; and radon's maintainability index
# rewards a share of comment lines). The code is measured, not its padding.
SLOPPY = (
    "    import os, sys\n    l = []\n    if a == None or b == None:\n"
    "        return None\n    return a + b\n"
)
PADDING = {
    "400-comments": "".join(
        f"    # note {i}: adds the two numbers carefully\n" for i in range(400)
    ),
    "400-docstrings": "".join(f"    '''note {i}: adds the two numbers'''\n" for i in range(400)),
    "400-blank-lines": "\n" * 400,
    "400-pass": "    pass\n" * 400,
    "mi-comment-sweet-spot": "".join(f"    # step {i}\n" for i in range(4)),
}


@pytest.mark.parametrize("padding", list(PADDING.values()), ids=list(PADDING))
async def test_padding_never_raises_the_quality_reward(padding: str) -> None:
    passed = judged(Verdict.PASSED, **MEASURED)
    plain = await evaluate(PRESETS["quality"], TASK, SLOPPY, passed)
    padded = await evaluate(PRESETS["quality"], TASK, padding + SLOPPY, passed)
    assert plain.total is not None
    assert padded.total is not None
    assert padded.total <= plain.total + 1e-9, (plain.explanation, padded.explanation)
    static = {c.kind: c for c in padded.components}["static"]
    assert static.score == 0.0
    assert "in 5 logical lines of code" in static.detail


def test_the_maintainability_index_has_no_comment_bonus() -> None:
    code = "def f(x):\n    y = x * 2\n    return y + 1\n"
    commented = "# one\n# two\n" + code
    assert (
        complexity_score(commented, Complexity()).score
        == complexity_score(code, Complexity()).score
    )


@pytest.mark.parametrize("depth", [1000, 20000])
async def test_code_a_tool_cannot_analyse_scores_zero_never_left_out(depth: int) -> None:
    """A deep expression made radon and bandit (and, deeper, ruff and ast) fail; the
    components were then "not applicable" and left out of the weights, dropping their
    0s (quality 0.86 -> 0.96). The code is the rollout's: 0, with the reason."""
    deep = "    x = " + "1 + " * depth + "1\n" + SLOPPY
    passed = judged(Verdict.PASSED, **MEASURED)
    plain = await evaluate(PRESETS["quality"], TASK, SLOPPY, passed)
    result = await evaluate(PRESETS["quality"], TASK, deep, passed)
    measured = [c for c in result.components if c.kind not in ("leak", "scaling")]
    assert all(c.score is not None for c in measured), result.explanation
    assert result.total is not None
    assert plain.total is not None
    assert result.total <= plain.total, (plain.explanation, result.explanation)
    parts = {c.kind: c for c in result.components}
    assert parts["complexity"].score == 0.0
    assert parts["security"].score == 0.0
