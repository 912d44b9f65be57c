"""Issue 17/18/16: the assert and function-call judges' process boundary.

Each kind with the verdict it must get: no state across test cases unless the task asks
for it; functions, in-place changes, objects of the prompt's classes and the solution
module's names crossing between the tests' process and the solution's; exceptions and
values of the solution that must not forge a pass or buy a mask; tests that run no
assertion. Every test here failed on main before the change (2026-12-02).
"""

from __future__ import annotations

import pytest

from execgym import RolloutLine, Scorer
from execgym.judges import AssertJudge, Verdict
from execgym.judges.function_call import FunctionCallJudge
from execgym.limits import Limits, MiB
from execgym.tasks import Rollout, Task
from execgym.tasks.datasets import load_builtin

LIMITS = Limits(wall_time_s=5, cpu_time_s=5, memory_bytes=256 * MiB)
COUNTER = "_n = [3]\ndef f(x):\n    _n[0] += 1\n    return _n[0]\n"
"""Counts its calls: 4 on the first call of a process, 5 on the second."""


def assert_task(tests: str, entry_point: str = "f", prompt: str = "", **more) -> Task:
    return Task(task_id="t", prompt=prompt, tests=tests, entry_point=entry_point, **more)


async def judge(sandbox, task: Task, completion: str):
    return await AssertJudge().judge(task, completion, sandbox, LIMITS)


async def score(sandbox, task: Task, completion: str):
    scorer = Scorer({task.task_id: task}, sandbox, LIMITS)
    return await scorer.score_one(
        RolloutLine(0, Rollout(task_id=task.task_id, completion=completion))
    )


# --- no state across test cases -----------------------------------------------------------

STATEFUL = "def check(candidate):\n    assert candidate(2) == 4\n    assert candidate(2) == 5\n"


@pytest.mark.parametrize(
    "completion",
    [
        COUNTER,  # a global
        "import functools\n@functools.lru_cache(None)\ndef g(x):\n    return []\n"
        "def f(x):\n    g(x).append(1)\n    return 3 + len(g(x))\n",  # memoised
        "class C:\n    n = 3\ndef f(x):\n    C.n += 1\n    return C.n\n",  # class-level
    ],
    ids=["global", "memoised", "class-level"],
)
async def test_assert_state_does_not_carry_from_case_to_case(hack_sandbox, completion) -> None:
    result = await judge(hack_sandbox, assert_task(STATEFUL), completion)
    assert result.verdict is Verdict.FAILED, result.message
    assert result.details["state"] == "fresh"
    shared = await judge(hack_sandbox, assert_task(STATEFUL, state="shared"), completion)
    assert shared.verdict is Verdict.PASSED, shared.message
    assert shared.details["state"] == "shared"


async def test_function_call_state_does_not_carry_from_case_to_case(hack_sandbox) -> None:
    task = Task.model_validate(
        {
            "task_id": "t",
            "kind": "function_call",
            "fn_name": "f",
            "test_cases": [{"args": [2], "expected": 4}, {"args": [2], "expected": 5}],
        }
    )
    judge_ = FunctionCallJudge()
    result = await judge_.judge(task, COUNTER, hack_sandbox, LIMITS)
    assert result.verdict is Verdict.FAILED, result.message
    assert result.details["state"] == "fresh"
    shared_task = task.model_copy(update={"state": "shared"})  # the state is the task's
    shared = await judge_.judge(shared_task, COUNTER, hack_sandbox, LIMITS)
    assert shared.verdict is Verdict.PASSED, shared.message
    assert shared.details["state"] == "shared"


SAME = (
    "def check(candidate):\n    seen = [candidate(2) for _ in range(3)]\n"
    "    assert seen[0] == seen[1] == seen[2], seen\n"
)
"""Three calls of a module freshly imported each time see the same state."""

COUNTS = "_n = [3]\ndef _count(*_):\n    _n[0] += 1\n"
"""A counter the solution's hooks below bump in the loaded process between calls."""

SEES_THE_COUNT = "\ndef f(x):\n    return _n[0]\n"


@pytest.mark.parametrize(
    "hook",
    [
        "import signal\nsignal.signal(signal.SIGCHLD, _count)\n",
        "import os\n_fork = os.fork\ndef _f():\n    _count()\n    return _fork()\nos.fork = _f\n",
        "import os\n_read = os.read\ndef _r(fd, n):\n    _count()\n    return _read(fd, n)\n"
        "os.read = _r\n",
        "import os\nos.register_at_fork(before=_count)\n",
        "import os\nos.register_at_fork(after_in_parent=_count)\n",
        "import sys\nsys.addaudithook(lambda event, args: event == 'os.fork' and _count())\n",
        "import sys\nclass W:\n    def write(self, s):\n        return len(s)\n"
        "    def flush(self):\n        _count()\nsys.stdout = W()\n",
        "import sys\nsys.setprofile(lambda frame, event, arg: event == 'c_call' and _count())\n",
        "import sys\ndef _t(frame, event, arg):\n    _count()\nsys.settrace(_t)\n",
        "import gc\ngc.callbacks.append(_count)\ngc.set_threshold(1)\n",
        # a thread of the loaded process counting the calls' forks as they are reaped
        "import resource, threading, time\ndef _watch():\n"
        "    last = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt\n"
        "    while True:\n        now = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt\n"
        "        if now != last:\n            _count()\n            last = now\n"
        "        time.sleep(0.0002)\nthreading.Thread(target=_watch, daemon=True).start()\n",
    ],
    ids=[
        "sigchld-handler",
        "os.fork-replaced",
        "os.read-replaced",
        "at-fork-before",
        "at-fork-after-in-parent",
        "audit-hook",
        "stdout-flush",
        "profile-function",
        "trace-function",
        "gc-callback",
        "thread",
    ],
)
async def test_nothing_of_the_solution_runs_in_its_loaded_process_between_calls(
    hack_sandbox, hook
) -> None:
    """With fresh state, each call is a fork of the loaded solution's process; code of
    the solution running in that process between two forks (a signal handler, a hook,
    a replaced function the harness calls, a thread) carried a count from call to call:
    ``(3, 4, 5)`` instead of ``(3, 3, 3)``: all but the gc callback on main before
    (2026-12-03; the thread whenever it won its race with the next fork)."""
    result = await judge(hack_sandbox, assert_task(SAME), COUNTS + hook + SEES_THE_COUNT)
    assert result.verdict is Verdict.PASSED, result.message
    assert result.details["state"] == "fresh"


async def test_nothing_of_the_solution_runs_between_function_calls_either(hack_sandbox) -> None:
    """The function-call harness serves fresh state the same way (its solution's
    process is :func:`solution_process` too): a ``SIGCHLD`` handler and an at-fork
    hook counted its cases on main before (2026-12-03)."""
    hooks = "import os, signal\nsignal.signal(signal.SIGCHLD, _count)\n"
    hooks += "os.register_at_fork(after_in_parent=_count)\n"
    task = Task.model_validate(
        {
            "task_id": "t",
            "kind": "function_call",
            "fn_name": "f",
            "test_cases": [{"args": [2], "expected": 3}] * 3,
        }
    )
    result = await FunctionCallJudge().judge(
        task, COUNTS + hooks + SEES_THE_COUNT, hack_sandbox, LIMITS
    )
    assert result.verdict is Verdict.PASSED, result.message
    assert result.details["state"] == "fresh"


async def test_objects_the_tests_keep_keep_their_own_state(bwrap_sandbox) -> None:
    """Fresh state is the module's: an object the tests made keeps what they did to it."""
    tests = (
        "def check(candidate):\n    s = Stack()\n    s.push(1)\n    s.push(2)\n"
        "    assert s.pop() == 2\n    assert s.size() == 1\n    assert candidate(s) == 1\n"
    )
    completion = (
        "class Stack:\n    def __init__(self):\n        self.items = []\n"
        "    def push(self, x):\n        self.items.append(x)\n"
        "    def pop(self):\n        return self.items.pop()\n"
        "    def size(self):\n        return len(self.items)\n"
        "def top(s):\n    return s.items[-1]\n"
    )
    for state in ("fresh", "shared"):
        result = await judge(bwrap_sandbox, assert_task(tests, "top", state=state), completion)
        assert result.verdict is Verdict.PASSED, (state, result.message)


# --- the plain-data boundary, widened -----------------------------------------------------


@pytest.mark.parametrize(
    ("tests", "entry_point", "completion"),
    [
        # issue 16, verl assert_case: two functions of the solution, and a helper
        (
            "def check(candidate):\n    assert add(1, 2) == 3\n    assert sub(3, 1) == 2\n",
            "add",
            "def add(a, b):\n    return a + b\ndef sub(a, b):\n    return a - b\n",
        ),
        (
            "def check(candidate):\n    assert double(square(3)) == 18\n",
            "square",
            "def double(x):\n    return 2 * x\ndef square(x):\n    return x * x\n",
        ),
        # issue 16: a LeetCode class used by the asserts
        (
            "def check(candidate):\n    assert Solution().twoSum([2,7,11,15], 9) == [0, 1]\n",
            "twoSum",
            "class Solution:\n    def twoSum(self, nums, target):\n"
            "        seen = {}\n        for i, x in enumerate(nums):\n"
            "            if target - x in seen:\n                return [seen[target - x], i]\n"
            "            seen[x] = i\n",
        ),
        # CRUXEval sample 344: a lambda of the tests, run where the solution runs
        (
            "def check(candidate):\n"
            "    assert candidate([6, 4, 2, 8, 15], (lambda x: x.reverse())) == [6, 4, 2, 8, 15]\n"
            "    assert candidate([1, 2], lambda x: x.append(len(x))) == [1, 2]\n",
            "f",
            "def f(list, operation):\n    new_list = list[:]\n    new_list.sort()\n"
            "    operation(new_list)\n    return list\n",
        ),
        # in-place changes copied back to the tests' arguments
        (
            "def check(candidate):\n    x = [3, 1, 2]\n    inner = [9, 8]\n    y = {'k': inner}\n"
            "    assert candidate(x, y) is None\n    assert x == [1, 2, 3]\n"
            "    assert inner == [8, 9] and y['k'] is inner and y['new'] == 1\n",
            "f",
            "def f(a, d):\n    a.sort()\n    d['k'].sort()\n    d['new'] = 1\n",
        ),
        # builtin types and standard-library modules the tests pass or use
        (
            "def check(candidate):\n    assert candidate((4, 5, 7.7), int) == [7.7]\n"
            "    assert candidate(math, 'pi') == round(math.pi, 2)\n",
            "f",
            "import math\ndef f(a, b):\n    if isinstance(a, tuple):\n"
            "        return [x for x in a if not isinstance(x, b)]\n"
            "    return round(getattr(a, b), 2)\n",
        ),
        # the entry point passed to itself (a solution whose function is named check)
        (
            "def check(candidate):\n    check = candidate\n    assert check(70) is False\n",
            "check",
            "def check(n):\n    return n == 71\n",
        ),
    ],
    ids=["two-functions", "helper", "leetcode-class", "lambda", "in-place", "types", "check"],
)
async def test_what_crosses_the_boundary(hack_sandbox, tests, entry_point, completion) -> None:
    result = await judge(hack_sandbox, assert_task(tests, entry_point), completion)
    assert result.verdict is Verdict.PASSED, result.message


LINKED = (
    "class ListNode:\n    def __init__(self, val=0, next=None):\n"
    "        self.val = val\n        self.next = next\n"
    "def list_node(values):\n    head = None\n    for v in reversed(values):\n"
    "        head = ListNode(v, head)\n    return head\n"
    "def values_of(node):\n    out = []\n    while node:\n"
    "        out.append(node.val)\n        node = node.next\n    return out\n"
)


@pytest.mark.parametrize("length", [3, 2000])
async def test_prompt_classes_cross_by_value(hack_sandbox, length: int) -> None:
    """LeetCode's ListNode: built by the tests, changed and returned by the solution."""
    tests = (
        "def check(candidate):\n"
        f"    head = list_node(list(range({length})))\n"
        f"    assert values_of(candidate(head)) == list(range({length}))[::-1]\n"
        "    assert candidate(None) is None\n"
    )
    completion = (
        "def reverse(head):\n    prev = None\n    while head:\n"
        "        head.next, prev, head = prev, head, head.next\n    return prev\n"
    )
    task = assert_task(tests, "reverse", prompt=LINKED)
    result = await judge(hack_sandbox, task, completion)
    assert result.verdict is Verdict.PASSED, result.message


async def test_a_cycle_crosses_by_value(bwrap_sandbox) -> None:
    tests = (
        "def check(candidate):\n    head = list_node([1, 2, 3])\n"
        "    head.next.next.next = head.next\n    assert candidate(head) is True\n"
        "    assert candidate(list_node([1, 2])) is False\n"
    )
    completion = (
        "def has_cycle(head):\n    seen = set()\n    while head:\n"
        "        if id(head) in seen:\n            return True\n"
        "        seen.add(id(head))\n        head = head.next\n    return False\n"
    )
    task = assert_task(tests, "has_cycle", prompt=LINKED)
    assert (await judge(bwrap_sandbox, task, completion)).verdict is Verdict.PASSED


async def test_solution_class_with_eq_of_its_own_redefining_the_prompt_class(bwrap_sandbox) -> None:
    """The prompt's class comes back as the prompt's: the solution's __eq__ never runs."""
    tests = "def check(candidate):\n    assert candidate(list_node([1])) == list_node([2])\n"
    completion = (
        "class ListNode:\n    def __init__(self, val=0, next=None):\n"
        "        self.val, self.next = val, next\n"
        "    def __eq__(self, other):\n        return True\n"
        "def f(head):\n    return head\n"
    )
    result = await judge(bwrap_sandbox, assert_task(tests, "f", prompt=LINKED), completion)
    assert result.verdict is Verdict.FAILED, result.message


@pytest.mark.parametrize("task_id", ["56", "349", "533", "596", "601", "367", "927"])
async def test_mbpp_references_whose_tests_use_the_solutions_names(
    bwrap_sandbox, task_id: str
) -> None:
    """MBPP tasks whose tests use what the reference module defines (issue 16, 17)."""
    task = load_builtin("mbpp").tasks[task_id]
    assert task.reference is not None
    result = await judge(bwrap_sandbox, task, task.reference)
    assert result.verdict is Verdict.PASSED, result.message


async def test_what_the_tests_cannot_pass_is_invalid_not_error(bwrap_sandbox) -> None:
    tests = "def check(candidate):\n    assert candidate(open) == 1\n"
    result = await score(bwrap_sandbox, assert_task(tests), "def f(x):\n    return 1\n")
    assert (result.verdict, result.reward) == (Verdict.INVALID, None), result.message
    assert "UnsupportedArgument" in result.message


# --- issue 18: forged passes and bought masks ---------------------------------------------


@pytest.mark.parametrize("name", ["StopIteration", "StopAsyncIteration"])
async def test_control_flow_exceptions_of_the_solution_steer_nothing(hack_sandbox, name) -> None:
    tests = (
        "def check(candidate):\n    assert all(map(candidate, [1, 2, 3]))\n"
        "    assert list(map(candidate, [1])) == [True]\n"
    )
    result = await score(hack_sandbox, assert_task(tests), f"def f(x):\n    raise {name}\n")
    assert (result.verdict, result.reward) == (Verdict.ERROR, 0.0), result.message
    assert name in result.message


async def test_a_deep_value_of_the_solution_passed_back_is_its_own_failure(hack_sandbox) -> None:
    tests = "def check(candidate):\n    assert candidate(candidate(0)) == 1\n"
    completion = "def f(x):\n    for _ in range(99):\n        x = [x]\n    return x\n"
    result = await score(hack_sandbox, assert_task(tests), completion)
    assert result.verdict in (Verdict.FAILED, Verdict.ERROR), result.message
    assert result.reward == 0.0


async def test_a_huge_int_where_a_float_is_expected_is_failed(hack_sandbox) -> None:
    task = Task.model_validate(
        {
            "task_id": "t",
            "kind": "function_call",
            "fn_name": "f",
            "test_cases": [{"args": [1], "expected": 1.5}],
        }
    )
    scorer = Scorer({"t": task}, hack_sandbox, LIMITS)
    result = await scorer.score_one(
        RolloutLine(0, Rollout(task_id="t", completion="def f(x):\n    return 10**400\n"))
    )
    assert (result.verdict, result.reward) == (Verdict.FAILED, 0.0), result.message


# --- tests that run no assertion ----------------------------------------------------------


@pytest.mark.parametrize(
    "tests",
    [
        "def check(candidate):\n    candidate(1)\n",
        "def check(candidate):\n    pass\n",
        "def check(candidate):\n    if candidate(1) == 'never':\n        assert False\n",
    ],
    ids=["no-assert", "no-call", "assert-never-reached"],
)
async def test_a_check_that_runs_no_assertion_is_invalid(bwrap_sandbox, tests: str) -> None:
    result = await score(bwrap_sandbox, assert_task(tests), "def f(x):\n    return None\n")
    assert (result.verdict, result.reward) == (Verdict.INVALID, None), result.message


def test_the_command_line_state_option_and_each_result_says_which_ran(
    bwrap_sandbox, tmp_path
) -> None:
    import json

    from click.testing import CliRunner

    from execgym.cli import main

    tasks, rollouts = tmp_path / "tasks.jsonl", tmp_path / "rollouts.jsonl"
    tasks.write_text(assert_task(STATEFUL).model_dump_json() + "\n")
    rollouts.write_text(json.dumps({"task_id": "t", "completion": COUNTER}) + "\n")
    verdicts = {}
    for state in ("fresh", "shared"):
        out = tmp_path / f"{state}.jsonl"
        done = CliRunner().invoke(
            main, ["score", str(tasks), str(rollouts), "-o", str(out), "--state", state]
        )
        assert done.exit_code == 0, done.output
        (result,) = [json.loads(line) for line in out.read_text().splitlines()]
        verdicts[state] = (result["verdict"], result["details"]["state"])
    assert verdicts == {"fresh": ("failed", "fresh"), "shared": ("passed", "shared")}


async def test_a_function_of_the_tests_with_asserts_runs_on_the_solutions_side(
    bwrap_sandbox,
) -> None:
    tests = (
        "def check(candidate):\n    def positive(x):\n        assert x > 0\n        return x\n"
        "    assert candidate(positive, 3) == 3\n"
    )
    completion = "def f(g, x):\n    return g(x)\n"
    result = await judge(bwrap_sandbox, assert_task(tests), completion)
    assert result.verdict is Verdict.PASSED, result.message


async def test_every_result_says_which_state_ran_even_without_a_report(bwrap_sandbox) -> None:
    task = assert_task(STATEFUL, state="shared")
    result = await judge(bwrap_sandbox, task, "def f(x):\n    while True:\n        pass\n")
    assert (result.verdict, result.details["state"]) == (Verdict.TIMEOUT, "shared")
