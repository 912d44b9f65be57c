"""Hand-made tasks with a known answer for each check (data for the tests)."""

from __future__ import annotations

from execgym.tasks import Task

GOOD = Task(
    task_id="good/abs_diff",
    prompt=(
        'def abs_diff(a, b):\n    """Return |a - b|.\n\n    >>> abs_diff(3, 5)\n    2\n    """\n'
    ),
    reference="    if a > b:\n        return a - b\n    return b - a\n",
    tests=(
        "def check(candidate):\n"
        "    assert candidate(3, 5) == 2\n"
        "    assert candidate(5, 3) == 2\n"
        "    assert candidate(4, 4) == 0\n"
        "    assert candidate(-1, 2) == 3\n"
        "    assert candidate(10, 0) == 10\n"
    ),
    entry_point="abs_diff",
)

RETURN_NONE_PASSES = Task(
    task_id="bad/return-none",
    prompt='def find(xs, x):\n    """Index of x in xs, or None."""\n',
    reference="    return xs.index(x) if x in xs else None\n",
    tests="def check(candidate):\n    assert candidate([1, 2], 3) is None\n",
    entry_point="find",
)

WRONG_REFERENCE = Task(
    task_id="bad/wrong-reference",
    prompt='def add(a, b):\n    """Return a + b."""\n',
    reference="    return a - b\n",
    tests="def check(candidate):\n    assert candidate(2, 3) == 5\n",
    entry_point="add",
)

FLAKY = Task(
    task_id="bad/flaky",
    prompt='def roll():\n    """A die roll."""\n',
    reference="    import random\n    return random.randint(1, 6)\n",
    tests=(
        "import random, time\n"
        "def check(candidate):\n"
        "    print(random.random(), time.perf_counter_ns())\n"
        "    assert 1 <= candidate() <= 6\n"
    ),
    entry_point="roll",
)

SLOW = Task(
    task_id="bad/slow-reference",
    prompt='def wait():\n    """Return 1, slowly."""\n',
    reference="    import time\n    time.sleep(1.2)\n    return 1\n",
    tests="def check(candidate):\n    assert candidate() == 1\n",
    entry_point="wait",
    limits={"wall_time_s": 2.0},
)

BAD_EXAMPLE = Task(
    task_id="bad/example",
    prompt='def double(x):\n    """Twice x.\n\n    >>> double(2)\n    5\n    """\n',
    reference="    return 2 * x\n",
    tests="def check(candidate):\n    assert candidate(2) == 4\n    assert candidate(0) == 0\n",
    entry_point="double",
)

DUPLICATE = GOOD.model_copy(update={"task_id": "bad/duplicate-of-good"})

WEAK_TESTS = Task(
    task_id="bad/weak-tests",
    prompt='def clamp(x, lo, hi):\n    """x limited to [lo, hi]."""\n',
    reference=(
        "    if x < lo:\n        return lo\n    if x > hi:\n        return hi\n    return x\n"
    ),
    tests="def check(candidate):\n    assert candidate(5, 0, 10) == 5\n",
    entry_point="clamp",
)

NO_ENTRY = Task(
    task_id="bad/no-entry-point",
    prompt="def helper():\n",
    reference="    return 1\n",
    tests="def check(candidate):\n    assert candidate() == 1\n",
    entry_point="solve",
)
