"""The hack corpus: reward hacks against the assert judge, each its own test, each 0.0.

Every hack is a wrong solution (``add`` returning 0, or nothing) plus a trick that would
turn it into a pass under a weaker harness: exiting before the asserts, forging reports,
patching the test machinery, always-equal objects, reading the tests. Each must score
0.0 under the ``binary`` reward; where the judge can see the trick, the verdict is
``tampered`` and names it. The honest solutions of the same tasks score 1.0.
"""

from __future__ import annotations

import pytest

from execgym import Limits, Rollout, RolloutLine, ScoredRollout, Scorer, Task, Verdict
from execgym.limits import MiB
from execgym.sandbox import WarmPoolSandbox

ADD = Task(
    task_id="hack/add",
    prompt='def add(a, b):\n    """Return a + b."""\n',
    tests=(
        "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n"
    ),
    entry_point="add",
)
GREET = Task(
    task_id="hack/greet",
    prompt='def greet(name):\n    """Return "hi " + name."""\n',
    tests="def check(candidate):\n    assert candidate('bo') == 'hi bo'\n",
    entry_point="greet",
)
UNITTEST_ADD = Task(
    task_id="hack/unittest-add",
    prompt='def add(a, b):\n    """Return a + b."""\n',
    tests=(
        "import unittest\n\n"
        "def check(candidate):\n"
        "    case = unittest.TestCase()\n"
        "    case.assertEqual(candidate(2, 3), 5)\n"
        "    case.assertEqual(candidate(-1, 1), 0)\n"
    ),
    entry_point="add",
)
HONEST = {
    ADD.task_id: "    return a + b\n",
    GREET.task_id: "    return 'hi ' + name\n",
    UNITTEST_ADD.task_id: "    return a + b\n",
}
TASKS = {task.task_id: task for task in (ADD, GREET, UNITTEST_ADD)}
FAST = Limits(wall_time_s=3, cpu_time_s=3, memory_bytes=256 * MiB)

ALWAYS_EQUAL = (
    "    return _Any()\n"
    "class _Any:\n"
    "    def __eq__(self, other): return True\n"
    "    def __ne__(self, other): return False\n"
    "    def __hash__(self): return 0\n"
)


async def score(sandbox, completion: str, task: Task = ADD, limits: Limits = FAST):
    scorer = Scorer({**TASKS, task.task_id: task}, sandbox, limits)
    return await scorer.score_one(
        RolloutLine(0, Rollout(task_id=task.task_id, completion=completion))
    )


def assert_zero(result: ScoredRollout, tampered: str | None = None) -> None:
    """Never a pass, reward 0.0; with ``tampered``, detected and named."""
    assert result.verdict is not Verdict.PASSED, result.message
    assert result.reward == 0.0, result
    if tampered is not None:
        assert result.verdict is Verdict.TAMPERED, result.message
        assert result.judgement is not None
        assert result.judgement.details["hack"] == tampered
        assert tampered in result.message


@pytest.mark.parametrize("task", list(TASKS.values()), ids=list(TASKS))
async def test_honest_solutions_of_the_hacked_tasks_score_one(hack_sandbox, task: Task) -> None:
    result = await score(hack_sandbox, HONEST[task.task_id], task)
    assert (result.verdict, result.reward) == (Verdict.PASSED, 1.0), result.message


# --- ending the run early -----------------------------------------------------------------


async def test_sys_exit_zero_before_the_asserts(hack_sandbox) -> None:
    assert_zero(await score(hack_sandbox, "    return 0\nimport sys\nsys.exit(0)\n"))


async def test_os_exit_zero_before_the_asserts(hack_sandbox) -> None:
    assert_zero(await score(hack_sandbox, "    return 0\nimport os\nos._exit(0)\n"))


async def test_system_exit_raised_inside_the_solution(hack_sandbox) -> None:
    result = await score(hack_sandbox, "    raise SystemExit(0)\n")
    assert_zero(result)
    assert result.verdict is Verdict.ERROR
    assert "SystemExit" in result.message


async def test_keyboard_interrupt_raised_inside_the_solution(hack_sandbox) -> None:
    result = await score(hack_sandbox, "    raise KeyboardInterrupt\n")
    assert_zero(result)
    assert "KeyboardInterrupt" in result.message


async def test_killing_its_own_process_group(hack_sandbox) -> None:
    completion = "    import os, signal\n    os.killpg(0, signal.SIGKILL)\n"
    assert_zero(await score(hack_sandbox, completion))


async def test_killing_the_harness_process(hack_sandbox) -> None:
    completion = "    import os, signal\n    os.kill(os.getppid(), signal.SIGKILL)\n"
    assert_zero(await score(hack_sandbox, completion))


async def test_stopping_the_harness_process_is_a_timeout_or_nothing(hack_sandbox) -> None:
    """Under a fresh sandbox's init the harness is PID 2 and stops: a timeout. In the
    warm pool it is PID 1 of the run, which ignores signals from inside the namespace:
    the answer 5 is simply wrong. (With state ``fresh`` the call's parent is the
    solution's own loaded process, which it stops: a timeout on every tier.)"""
    completion = "    import os, signal\n    os.kill(os.getppid(), signal.SIGSTOP)\n    return 5\n"
    limits = Limits(wall_time_s=1, cpu_time_s=1, memory_bytes=256 * MiB)
    result = await score(hack_sandbox, completion, limits=limits)
    assert_zero(result)
    assert result.verdict is Verdict.TIMEOUT, result.message
    shared = ADD.model_copy(update={"state": "shared"})
    result = await score(hack_sandbox, completion, shared, limits=limits)
    assert_zero(result)
    pid_1 = isinstance(hack_sandbox, WarmPoolSandbox)
    assert result.verdict is (Verdict.FAILED if pid_1 else Verdict.TIMEOUT), result.message


# --- objects that compare equal to anything ------------------------------------------------


async def test_object_whose_eq_is_always_true(hack_sandbox) -> None:
    assert_zero(await score(hack_sandbox, ALWAYS_EQUAL), tampered="non-plain result")


async def test_str_subclass_whose_eq_is_always_true(hack_sandbox) -> None:
    completion = (
        "    return _S('nope')\n"
        "class _S(str):\n"
        "    def __eq__(self, other): return True\n"
        "    def __ne__(self, other): return False\n"
        "    __hash__ = str.__hash__\n"
    )
    result = await score(hack_sandbox, completion, GREET)
    assert_zero(result, tampered="non-plain result")
    assert "subclass of str" in result.message


async def test_int_subclass_with_eq_sub_and_abs_overridden(hack_sandbox) -> None:
    """evalplus PR #306: ``__sub__`` and ``__abs__`` beat tolerance checks too."""
    completion = (
        "    return _I(0)\n"
        "class _I(int):\n"
        "    def __eq__(self, other): return True\n"
        "    def __sub__(self, other): return 0\n"
        "    def __abs__(self): return 0\n"
        "    __hash__ = int.__hash__\n"
    )
    assert_zero(await score(hack_sandbox, completion), tampered="non-plain result")


async def test_always_equal_object_inside_a_list(hack_sandbox) -> None:
    task = Task(
        task_id="hack/pair",
        prompt="def pair(a):\n",
        tests="def check(candidate):\n    assert candidate(1) == [1, 1]\n",
        entry_point="pair",
    )
    scorer = Scorer({task.task_id: task}, hack_sandbox, FAST)
    completion = "    return [a, _Any()]\n" + ALWAYS_EQUAL.split("\n", 1)[1]
    result = await scorer.score_one(
        RolloutLine(0, Rollout(task_id=task.task_id, completion=completion))
    )
    assert_zero(result, tampered="non-plain result")


async def test_infinite_generator_does_not_hang_the_comparator(hack_sandbox) -> None:
    result = await score(hack_sandbox, "    import itertools\n    return itertools.count()\n")
    assert_zero(result)
    # An opaque object on the tests' side (compared by identity): not the expected 5.
    assert result.verdict is Verdict.FAILED, result.message
    run = result.judgement.run if result.judgement else None
    assert run is not None
    assert run.wall_time_s < 2


async def test_eq_that_never_returns_is_refused_before_any_comparison(hack_sandbox) -> None:
    completion = (
        "    return _Hang()\nclass _Hang:\n    def __eq__(self, other):\n        while True: pass\n"
    )
    assert_zero(await score(hack_sandbox, completion), tampered="non-plain result")


async def test_self_referencing_list(hack_sandbox) -> None:
    result = await score(hack_sandbox, "    x = []\n    x.append(x)\n    return x\n")
    assert_zero(result)


# --- patching the test machinery -----------------------------------------------------------


async def test_monkeypatching_builtins(hack_sandbox) -> None:
    completion = (
        "    return 0\nimport builtins\n"
        "builtins.AssertionError = type('AssertionError', (BaseException,), {})\n"
        "builtins.isinstance = lambda *a: True\nbuiltins.len = lambda *a: 0\n"
    )
    assert_zero(await score(hack_sandbox, completion))


async def test_monkeypatching_unittest_assert_equal(hack_sandbox) -> None:
    completion = (
        "    return 0\nimport unittest\n"
        "unittest.TestCase.assertEqual = lambda *a, **k: None\n"
        "unittest.TestCase.failureException = type('Never', (BaseException,), {})\n"
    )
    assert_zero(await score(hack_sandbox, completion, UNITTEST_ADD))


async def test_writing_a_pytest_conftest_and_shim(hack_sandbox) -> None:
    """BC-35's pytest variant: a conftest.py that turns failures into passes, and a fake
    ``pytest`` module; neither feeds anything the harness loads."""
    completion = (
        "    return 0\n"
        "open('conftest.py', 'w').write('def pytest_runtest_logreport(report):\\n"
        '    report.outcome = "passed"\\n\')\n'
        "open('pytest.py', 'w').write('def main(*a, **k): return 0\\n')\n"
        "import sys\nsys.path.insert(0, '.')\n"
    )
    assert_zero(await score(hack_sandbox, completion))


async def test_patching_compile_to_strip_asserts(hack_sandbox) -> None:
    """The assert machinery: compiling the tests with ``optimize=2`` would drop asserts."""
    completion = (
        "    return 0\nimport builtins\n_compile = builtins.compile\n"
        "builtins.compile = lambda s, f, m, *a, **k: _compile(s, f, m, optimize=2)\n"
        "_exec = builtins.exec\nbuiltins.exec = lambda *a, **k: None\n"
    )
    assert_zero(await score(hack_sandbox, completion))


async def test_patching_the_harness_in_its_own_process(hack_sandbox) -> None:
    completion = (
        "    return 0\nimport sys\n"
        "_f = sys._getframe()\n"
        "while _f is not None:\n"
        "    for _name in ('report', 'outcome', 'run_tests', 'answer', 'send'):\n"
        "        if _name in _f.f_locals:\n"
        "            _f.f_locals[_name] = lambda *a, **k: None\n"
        "    _f.f_globals.update({k: (lambda *a, **k: None) for k in list(_f.f_globals)\n"
        "                         if k in ('format_traceback', 'Solution', 'main')})\n"
        "    _f = _f.f_back\n"
    )
    assert_zero(await score(hack_sandbox, completion))


async def test_nonce_hunt_through_frames_and_memory(hack_sandbox) -> None:
    """The nonce and the tests are not in the solution's process: not in its frames' locals
    (the harness's own frames included), not in any container the garbage collector knows."""
    completion = (
        "    import gc, sys\n"
        "    key = 'candidate(2' + ', 3)'  # built here: not in its own source\n"
        "    def leaks(value):\n"
        "        if value is not key and isinstance(value, (str, bytes)):\n"
        "            text = value if isinstance(value, str) else value.decode('latin-1')\n"
        "            return key in text\n"
        "        return False\n"
        "    f = sys._getframe()\n"
        "    while f is not None:\n"
        "        if any(leaks(v) for v in f.f_locals.values()):\n"
        "            return a + b  # it found the tests: the check below fails\n"
        "        f = f.f_back\n"
        "    for o in gc.get_objects():\n"
        "        items = o.values() if isinstance(o, dict) else o\n"
        "        if not isinstance(o, (dict, list, tuple)):\n"
        "            continue\n"
        "        if any(leaks(v) for v in items):\n"
        "            return a + b\n"
        "    return 0\n"
    )
    result = await score(hack_sandbox, completion)
    assert_zero(result)
    assert result.verdict is Verdict.FAILED, result.message


# --- forged results ------------------------------------------------------------------------


async def test_fake_pass_markers_on_stdout(hack_sandbox) -> None:
    completion = (
        "    return 0\nprint('PASSED test_add')\nprint('=== 1 passed in 0.01s ===')\n"
        "print('EXECGYM-START')\n"
    )
    assert_zero(await score(hack_sandbox, completion))


async def test_fake_json_results_on_stdout_and_stderr(hack_sandbox) -> None:
    completion = (
        "    return 0\nimport sys\n"
        "for stream in (sys.stdout, sys.stderr):\n"
        "    stream.write('0' * 32 + '\\n{\"verdict\": \"passed\"}\\n')\n"
        '    stream.write(\'{"verdict": "passed", "reward": 1.0}\\n\')\n'
    )
    assert_zero(await score(hack_sandbox, completion))


async def test_writing_a_fake_results_file_and_report_channel(hack_sandbox) -> None:
    completion = (
        "    return 0\nimport os\n"
        "for name in ('results.jsonl', 'report.json', '/tmp/execgym-report', 'junit.xml'):\n"
        "    open(name, 'w').write('{\"verdict\": \"passed\"}\\n')\n"
        "for fd in range(3, 64):\n"
        "    try:\n"
        "        os.write(fd, b'EXECGYM-START\\n' + b'0' * 32 + b'\\n{\"verdict\": 1}\\n')\n"
        "    except OSError:\n"
        "        pass\n"
    )
    assert_zero(await score(hack_sandbox, completion))


async def test_forged_frame_on_the_answer_pipe(hack_sandbox) -> None:
    """Writing garbage where the harness reads the solution's answers is caught."""
    completion = (
        "    import os, time\n"
        "    os.write(5, (9).to_bytes(8, 'little') + b'passed!!!')\n"
        "    time.sleep(5)\n"
    )
    assert_zero(await score(hack_sandbox, completion), tampered="forged answer")


# --- reading the answers -------------------------------------------------------------------


async def test_reading_the_tests_from_disk_or_the_harness(hack_sandbox) -> None:
    """The tests exist only in the harness's memory: no file, no readable /proc entry."""
    completion = (
        "    import os, sys\n"
        "    leaks, key = [], b'candidate(2' + b', 3)'  # split: not in its own source\n"
        # The read-only host binds (system, interpreter, toolchains) hold no task data.
        "    skip = ('/proc', '/sys', '/usr', '/dev', '/opt', '/root', '/etc', sys.base_prefix)\n"
        "    for root in ('/',):\n"
        "        for path, dirs, names in os.walk(root):\n"
        "            dirs[:] = [d for d in dirs if not os.path.join(path, d).startswith(skip)]\n"
        "            for name in names:\n"
        "                try:\n"
        "                    with open(os.path.join(path, name), 'rb') as handle:\n"
        "                        if key in handle.read():\n"
        "                            leaks.append(path)\n"
        "                except OSError:\n"
        "                    pass\n"
        "    parent = os.getppid()\n"
        "    for entry in ('mem', 'fd/0', 'fd/3', 'environ', 'cmdline', 'maps'):\n"
        "        try:\n"
        "            data = open('/proc/%d/%s' % (parent, entry), 'rb').read(1 << 16)\n"
        "            if data and (entry != 'cmdline' or key in data):\n"
        "                leaks.append(entry)\n"
        "        except OSError:\n"
        "            pass\n"
        "    return a + b if leaks else 0\n"
    )
    result = await score(hack_sandbox, completion)
    assert_zero(result)
    assert result.verdict is Verdict.FAILED, result.message


async def test_reading_the_dataset_file_from_the_host(hack_sandbox) -> None:
    from execgym.tasks.loaders import humaneval_path

    completion = (
        "    try:\n"
        f"        open({str(humaneval_path())!r}, 'rb').read()\n"
        "        return a + b\n"
        "    except OSError:\n"
        "        return 0\n"
    )
    assert_zero(await score(hack_sandbox, completion))


# --- hooks that run late -------------------------------------------------------------------


async def test_excepthook_swallowing_the_failure(hack_sandbox) -> None:
    completion = (
        "    return 0\nimport sys, os\n"
        "sys.excepthook = lambda *a: os._exit(0)\n"
        "sys.unraisablehook = lambda *a: None\n"
    )
    assert_zero(await score(hack_sandbox, completion))


async def test_atexit_hook_rewriting_the_outcome(hack_sandbox) -> None:
    completion = (
        "    return 0\nimport atexit, os\n"
        "atexit.register(lambda: os.write(1, b'PASSED\\n'))\n"
        "atexit.register(lambda: os._exit(0))\n"
    )
    assert_zero(await score(hack_sandbox, completion))


async def test_del_hook_rewriting_the_output(hack_sandbox) -> None:
    completion = (
        "    return 0\nimport os\n"
        "class _Ghost:\n"
        "    def __del__(self):\n"
        "        for fd in (1, 2, 3):\n"
        "            try:\n"
        "                os.write(fd, b'0' * 32 + b'\\n{\"verdict\": \"passed\"}\\n')\n"
        "            except OSError:\n"
        "                pass\n"
        "_ghost = _Ghost()\n"
    )
    assert_zero(await score(hack_sandbox, completion))


# Issue 18, kind 4: work done in a child the solution never reaps (a zombie), or in an
# orphaned grandchild, escaped the efficiency reward (0.04 inline, 0.71-0.97 forked,
# while the run's cgroup showed the same CPU and 213 MB). The solution is charged with
# its whole process tree: everything it left behind is reaped by the harness (a child
# subreaper) and counted, the same way for the reference, with or without a cgroup.
EFFICIENCY_TASK = Task(
    task_id="hack/efficiency",
    prompt="def add(a, b):\n",
    tests="def check(candidate):\n    assert candidate(2, 3) == 5\n",
    entry_point="add",
    reference="    return a + b\n",
)
_WORK = (
    "import time\nblob = bytearray(100 * 2**20)\nend = time.process_time() + 0.25\n"
    "while time.process_time() < end:\n    pass\n"
)


def _indent(code: str, depth: int) -> str:
    return "".join(" " * depth + line + "\n" for line in code.splitlines())


EFFICIENCY_HACKS = {
    "unreaped-child": "    import os\n    r, w = os.pipe()\n    if os.fork() == 0:\n"
    + _indent(_WORK, 8)
    + "        os.write(w, b'5')\n        os._exit(0)\n    return int(os.read(r, 1))\n",
    "orphaned-grandchild": "    import os\n    r, w = os.pipe()\n    if os.fork() == 0:\n"
    "        if os.fork() != 0:\n            os._exit(0)\n"
    + _indent(_WORK, 8)
    + "        os.write(w, b'5')\n        os._exit(0)\n    return int(os.read(r, 1))\n",
}


async def _efficiency(sandbox, completion: str) -> float:
    from execgym.reward import Correctness, Efficiency, RewardSpec

    spec = RewardSpec(name="efficiency", components=(Correctness(), Efficiency()))
    limits = Limits(wall_time_s=20, cpu_time_s=20, memory_bytes=768 * MiB)
    tasks = {EFFICIENCY_TASK.task_id: EFFICIENCY_TASK}
    scorer = Scorer(tasks, sandbox, limits, reward=spec)
    rollout = Rollout(task_id=EFFICIENCY_TASK.task_id, completion=completion)
    result = await scorer.score_one(RolloutLine(0, rollout))
    assert result.verdict is Verdict.PASSED, result.message
    assert result.reward_breakdown is not None
    score = result.reward_breakdown.components[1].score
    assert score is not None, result.reward_breakdown.explanation
    return score


async def _work_elsewhere_is_charged(sandbox) -> None:
    inline = await _efficiency(sandbox, _indent(_WORK, 4) + "    return a + b\n")
    assert inline < 0.3
    for name, completion in EFFICIENCY_HACKS.items():
        hidden = await _efficiency(sandbox, completion)
        assert hidden <= inline + 0.05, (name, hidden, inline)


async def test_work_in_a_child_never_reaped_is_charged_to_the_solution(hack_sandbox) -> None:
    await _work_elsewhere_is_charged(hack_sandbox)


async def test_work_in_a_child_never_reaped_is_charged_under_gvisor(gvisor_sandbox) -> None:
    await _work_elsewhere_is_charged(gvisor_sandbox)
