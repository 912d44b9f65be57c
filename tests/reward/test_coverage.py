"""The coverage component: the model writes tests; they earn coverage only by calling
the reference, which runs under coverage.py in a process they cannot reach."""

from __future__ import annotations

import pytest

from execgym import Limits, Rollout, RolloutLine, Scorer, Task, Verdict
from execgym.limits import MiB
from execgym.reward import Correctness, Coverage, RewardSpec

SIGN = Task(
    task_id="cov/sign",
    prompt="def sign(x):\n",
    tests="def check(candidate):\n    assert candidate(1) == 1\n",
    entry_point="sign",
    reference="    if x > 0:\n        return 1\n    if x < 0:\n        return -1\n    return 0\n",
)
SPEC = RewardSpec(name="tests", components=(Coverage(),))
FAST = Limits(wall_time_s=5, cpu_time_s=5, memory_bytes=256 * MiB)


async def score(sandbox, tests: str, spec: RewardSpec = SPEC):
    scorer = Scorer({SIGN.task_id: SIGN}, sandbox, FAST, reward=spec)
    return await scorer.score_one(RolloutLine(0, Rollout(task_id=SIGN.task_id, completion=tests)))


async def test_full_partial_and_wrong_tests(bwrap_sandbox) -> None:
    full = await score(
        bwrap_sandbox, "assert sign(5) == 1\nassert sign(-2) == -1\nassert sign(0) == 0\n"
    )
    assert (full.verdict, full.reward) == (Verdict.PASSED, 1.0), full.message
    partial = await score(bwrap_sandbox, "def test_positive():\n    assert sign(3) == 1\n")
    assert partial.verdict is Verdict.PASSED
    assert partial.reward is not None
    assert 0.2 < partial.reward < 0.6
    assert partial.reward_breakdown is not None
    assert "line 50%" in partial.reward_breakdown.components[0].detail
    wrong = await score(bwrap_sandbox, "assert sign(5) == 1\nassert sign(0) == 1\n")
    assert (wrong.verdict, wrong.reward) == (Verdict.FAILED, 0.0)


@pytest.mark.parametrize(
    "tests",
    [
        'print(\'{"verdict": "passed", "lines": [1, 2, 3, 4, 5, 6], "arcs": []}\')\n',
        'import os\nFAKE = b\'{"verdict": "passed", "lines": [1, 2, 3, 4, 5, 6]}\\n\'\n'
        "for fd in range(3, 32):\n    try:\n"
        "        os.write(fd, b'0' * 32 + b'\\n' + FAKE)\n"
        "    except OSError:\n        pass\n",
        "import sys\nsys.modules['coverage'] = None\n"
        "open('/work/reference.py', 'w').write('x = 1\\n')\n",
        "import os\nos._exit(0)\n",
    ],
    ids=["fake-report-on-stdout", "fake-report-on-every-fd", "tamper-coverage-files", "exit"],
)
async def test_forging_coverage_earns_nothing(bwrap_sandbox, tests: str) -> None:
    result = await score(bwrap_sandbox, tests)
    assert result.reward is not None
    assert result.reward < 0.1, result.reward_breakdown


async def test_correctness_means_the_tests_run_through_on_the_reference(bwrap_sandbox) -> None:
    spec = RewardSpec(components=(Correctness(weight=1), Coverage(weight=1)))
    result = await score(bwrap_sandbox, "assert sign(-1) == -1\n", spec)
    assert result.reward_breakdown is not None
    correctness, coverage = result.reward_breakdown.components
    assert correctness.score == 1.0
    assert coverage.score is not None
    assert 0 < coverage.score < 1


async def test_a_task_without_a_reference_is_invalid(bwrap_sandbox) -> None:
    task = SIGN.model_copy(update={"reference": None})
    scorer = Scorer({task.task_id: task}, bwrap_sandbox, FAST, reward=SPEC)
    result = await scorer.score_one(RolloutLine(0, Rollout(task_id=task.task_id, completion="")))
    assert (result.verdict, result.reward) == (Verdict.INVALID, None)
    assert "needs a reference" in result.message
