"""The assert judge on real sandboxes: each verdict, and cheats that must never pass."""

from __future__ import annotations

import marshal
import subprocess
import sys
import warnings
from dataclasses import replace

import pytest

from execgym.judges import AssertJudge, Verdict
from execgym.judges.assert_tests import (
    _MAGIC,
    START_MARKER,
    build_program,
    compiled_tests,
    encode_job,
    interpret_run,
)
from execgym.limits import Limits, MiB
from execgym.sandbox import Status
from execgym.tasks import Task
from execgym.testing import fake_result

ADD = Task(
    task_id="t/add",
    prompt='def add(a, b):\n    """Return a + b."""\n',
    tests=(
        "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n"
    ),
    entry_point="add",
)
FAST = Limits(wall_time_s=2, memory_bytes=256 * MiB)


async def judge(sandbox, completion: str, task: Task = ADD, limits: Limits = FAST):
    return await AssertJudge().judge(task, completion, sandbox, limits)


@pytest.mark.parametrize(
    ("completion", "verdict"),
    [
        ("    return a + b\n", Verdict.PASSED),
        ("    return a - b\n", Verdict.FAILED),
        ("    return None\n", Verdict.FAILED),
        ("    return undefined_name\n", Verdict.ERROR),
        ("    return (a +\n", Verdict.ERROR),  # syntax error
        ("    while True: pass\n", Verdict.TIMEOUT),
        ("    x = bytearray(2 * 1024 ** 3); return a + b\n", Verdict.MEMORY_EXCEEDED),
        ("    while True: print('y' * 10000)\n", Verdict.OUTPUT_EXCEEDED),
    ],
)
async def test_verdicts(sandbox, completion: str, verdict: Verdict) -> None:
    # The 2 s wall limit is what the TIMEOUT case runs into; for the others it is only a
    # backstop, which a fresh gVisor sandbox's start-up (or a 2 GiB allocation refused)
    # passed at load 20: every gvisor case but TIMEOUT came back 'timeout'.
    limits = FAST if verdict is Verdict.TIMEOUT else replace(FAST, wall_time_s=30)
    result = await judge(sandbox, completion, limits=limits)
    assert result.verdict is verdict, result


async def test_error_keeps_type_message_and_traceback(bwrap_sandbox) -> None:
    result = await judge(bwrap_sandbox, "    return {}[a]\n")
    assert result.verdict is Verdict.ERROR
    assert result.error is not None
    assert result.error.type == "KeyError"
    assert result.error.message == "2"
    assert 'File "solution.py", line 3, in add' in result.error.traceback
    assert "return {}[a]" in result.error.traceback
    assert "runner.py" not in result.error.traceback


async def test_failed_assertion_points_at_the_test_line(bwrap_sandbox) -> None:
    result = await judge(bwrap_sandbox, "    return 0\n")
    assert result.verdict is Verdict.FAILED
    assert result.error is not None
    assert result.error.type == "AssertionError"
    assert "assert candidate(2, 3) == 5" in result.error.traceback


@pytest.mark.parametrize(
    "completion",
    [
        "    import sys; sys.exit(0)\n",
        "    import os; os._exit(0)\n",
        "    raise SystemExit(0)\n",
        "    raise KeyboardInterrupt\n",
        "    import os, signal; os.killpg(0, signal.SIGKILL)\n",
        "    import os, signal; os.kill(os.getpid(), signal.SIGKILL)\n",
        "    print('PASSED test_add'); print('=== 1 passed in 0.01s ==='); return 0\n",
        "    import os; os.write(3, b'0' * 32 + b'\\n{\"verdict\": \"passed\"}\\n'); os._exit(0)\n",
        "    import atexit, os; atexit.register(lambda: os._exit(0)); return 0\n",
    ],
    ids=[
        "sys.exit",
        "os._exit",
        "SystemExit",
        "KeyboardInterrupt",
        "killpg",
        "kill-self",
        "fake-markers",
        "forged-report",
        "atexit",
    ],
)
async def test_cheats_never_pass(bwrap_sandbox, completion: str) -> None:
    result = await judge(bwrap_sandbox, completion)
    assert result.verdict is not Verdict.PASSED, result
    assert result.verdict in (Verdict.ERROR, Verdict.FAILED)


async def test_completion_reading_stdin_sees_eof(bwrap_sandbox) -> None:
    result = await judge(bwrap_sandbox, "    import sys; return len(sys.stdin.read()) + a + b\n")
    assert result.verdict is Verdict.PASSED


async def test_unicode_output_under_any_host_locale(bwrap_sandbox) -> None:
    result = await judge(bwrap_sandbox, "    print('café ✓'); return a + b\n")
    assert result.verdict is Verdict.PASSED
    assert result.run is not None
    assert result.run.stdout.decode() == "café ✓\n" * 2


def test_report_without_our_nonce_is_not_a_pass() -> None:
    forged = START_MARKER + b"f" * 32 + b'\n{"verdict": "passed"}\n'
    verdict = interpret_run(fake_result(Status.OK, report=forged), nonce="a" * 32).verdict
    assert verdict is Verdict.ERROR


def test_report_with_our_nonce_but_a_bad_exit_is_not_a_pass() -> None:
    report = START_MARKER + b"a" * 32 + b'\n{"verdict": "passed"}\n'
    run = fake_result(Status.RUNTIME_ERROR, exit_code=1, report=report)
    assert interpret_run(run, nonce="a" * 32).verdict is Verdict.ERROR


def test_limits_decide_before_the_report() -> None:
    report = START_MARKER + b"a" * 32 + b'\n{"verdict": "passed"}\n'
    for status, verdict in [
        (Status.TIME_LIMIT, Verdict.TIMEOUT),
        (Status.MEMORY_LIMIT, Verdict.MEMORY_EXCEEDED),
        (Status.OUTPUT_LIMIT, Verdict.OUTPUT_EXCEEDED),
        (Status.SANDBOX_ERROR, Verdict.SANDBOX_ERROR),
    ]:
        assert interpret_run(fake_result(status, report=report), "a" * 32).verdict is verdict


def test_job_encoding_counts_bytes_not_characters() -> None:
    job = encode_job("n" * 32, "f", "é = 1\n", "def check(c): pass\n", context="ü = 2\n")
    assert job[:10] == b"%010d" % len("f\né = 1\n".encode())
    second = job[10 + int(job[:10]) :]
    header, _, body = second[10:].partition(b"\n")
    assert int(second[:10]) == len(second) - 10
    nonce, mode, context, tests, code, magic, state = header.split()
    assert state == b"fresh"
    assert nonce == b"n" * 32
    assert (mode, context, tests, magic) == (b"check", b"7", b"19", _MAGIC.encode())
    text, compiled = body[:26], body[26:]
    assert text.decode() == "ü = 2\ndef check(c): pass\n"
    assert compiled == compiled_tests("ü = 2\n\n\ndef check(c): pass\n\n")
    assert int(code) == len(compiled) > 0
    loaded: dict[str, object] = {"__execgym_asserted__": lambda: True}
    exec(marshal.loads(compiled), loaded)
    assert loaded["ü"] == 2
    assert callable(loaded["check"])


def test_compiled_tests_keep_their_asserts_under_python_minus_o() -> None:
    # A host running Python with -O (or PYTHONOPTIMIZE=1) compiled the asserts away by
    # default, and every wrong rollout then passed.
    probe = (
        "import marshal, sys\n"
        "from execgym.judges.assert_tests import compiled_tests\n"
        "assert sys.flags.optimize == 1\n"
        "namespace = {'__execgym_asserted__': lambda: True}\n"
        "code = compiled_tests('def check(c):\\n    assert c(1) == 2\\n')\n"
        "exec(marshal.loads(code), namespace)\n"
        "try:\n"
        "    namespace['check'](lambda x: 12345)\n"
        "except AssertionError:\n"
        "    print('kept')\n"
    )
    done = subprocess.run(
        [sys.executable, "-O", "-c", probe], capture_output=True, text=True, check=False
    )
    assert done.stdout == "kept\n", done.stderr


def test_tests_that_draw_a_compiler_warning_are_compiled_in_the_run() -> None:
    # ... so that the warning lands in the run's stderr, not in the host's.
    with warnings.catch_warnings(record=True) as host_saw:
        warnings.simplefilter("always")
        assert compiled_tests('def check(c):\n    assert c("\\d")\n') == b""
    assert host_saw == []


def test_tests_that_do_not_compile_travel_as_text_only() -> None:
    # The harness compiles them itself and reports the task's error (never a crash).
    assert compiled_tests("def check(c):\n    assert (\n") == b""
    assert compiled_tests("x = '\udc80'\n") == b""  # the harness would decode it otherwise
    job = encode_job("n" * 32, "f", "pass\n", "def check(c):\n  (\n")
    second = job[10 + int(job[:10]) :]
    assert second[10:].split(b"\n", 1)[0].split()[4] == b"0"


@pytest.mark.parametrize(
    ("tests", "verdict"),
    [
        ("def check(c):\n    assert c(1) == 2\n", Verdict.PASSED),
        ("def check(c):\n    assert c(1) == 3\n", Verdict.FAILED),
        ("def check(c):\n    assert (\n", Verdict.INVALID),
    ],
)
@pytest.mark.parametrize("magic", ["ours", "another interpreter's"])
async def test_the_harness_runs_compiled_tests_and_falls_back_to_text(
    tests, verdict, magic, sandbox, monkeypatch
) -> None:
    if magic != "ours":  # bytecode of another version is never loaded: the text is compiled
        monkeypatch.setattr("execgym.judges.assert_tests._MAGIC", "0d0d0d0a")
    task = Task(task_id="t/1", prompt="", entry_point="f", tests=tests)
    judgement = await AssertJudge().judge(
        task, "def f(x):\n    return x + 1\n", sandbox, Limits(wall_time_s=5)
    )
    assert judgement.verdict is verdict, judgement


def test_no_start_marker_means_the_sandbox_failed_not_the_model() -> None:
    for status, exit_code in [
        (Status.RUNTIME_ERROR, 1),
        (Status.RUNTIME_ERROR, 127),
        (Status.OK, 0),
        (Status.TIME_LIMIT, None),
    ]:
        run = fake_result(status, exit_code=exit_code, stderr=b"bwrap: Can't find source path")
        judgement = interpret_run(run, "a" * 32)
        assert judgement.verdict is Verdict.SANDBOX_ERROR
        assert "never started the test harness" in judgement.message
        assert "Can't find source path" in judgement.message


def test_start_marker_matches_the_runner() -> None:
    import ast

    from execgym import guest

    runner = guest.source("assert_runner")
    values = [
        ast.literal_eval(node.value)
        for node in ast.parse(runner).body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "START_MARKER"
    ]
    assert values == [START_MARKER]


def test_faking_a_setup_failure_is_still_the_models_error() -> None:
    # The solution prints what bwrap prints and exits 1, after the harness started.
    run = fake_result(
        Status.RUNTIME_ERROR,
        exit_code=1,
        report=START_MARKER,
        stderr=b"bwrap: Can't find source path /x: No such file",
    )
    assert interpret_run(run, "a" * 32).verdict is Verdict.ERROR


@pytest.mark.parametrize(
    ("prompt", "completion", "expected"),
    [
        ("def f():\n", "    return 1\n", "def f():\n    return 1\n"),
        (
            'from typing import List\n\ndef f(x: List[int]) -> int:\n    """Doc."""',
            "def f(x: List[int]) -> int:\n    return 1",
            'from typing import List\n\ndef f(x: List[int]) -> int:\n    """Doc."""\n\n'
            "def f(x: List[int]) -> int:\n    return 1",
        ),
        (
            "import math\ndef f(x):\n",
            "\nimport math\ndef f(x):\n    return 1\n",
            "import math\n\n\nimport math\ndef f(x):\n    return 1\n",
        ),
    ],
    ids=["continuation", "bc42-full-function-no-newline", "stub-without-body"],
)
def test_build_program_handles_bodies_and_whole_solutions(
    prompt: str, completion: str, expected: str
) -> None:
    task = Task(task_id="t", prompt=prompt, tests="def check(c): pass", entry_point="f")
    assert build_program(task, completion) == expected


async def test_the_job_cannot_be_read_back_from_stdin(bwrap_sandbox) -> None:
    completion = (
        "    import os\n    os.lseek(0, 0, os.SEEK_SET)\n"
        "    print(os.read(0, 100))\n    return a + b\n"
    )
    result = await judge(bwrap_sandbox, completion)
    assert result.verdict is Verdict.PASSED
    assert result.run is not None
    assert b"def check" not in result.run.stdout


async def test_replacing_harness_names_in_main_changes_nothing(bwrap_sandbox) -> None:
    completion = (
        "    return 0\nimport __main__\n"
        "for name in list(vars(__main__)):\n"
        "    if not name.startswith('__'):\n"
        "        setattr(__main__, name, lambda *a, **k: None)\n"
    )
    result = await judge(bwrap_sandbox, completion)
    # It can only break its own process (the harness is another one): never a pass.
    assert result.verdict in (Verdict.FAILED, Verdict.ERROR), result.message


@pytest.mark.parametrize(
    "completion",
    [
        "    import collections\n    return collections.Counter({'s': a + b})\n",
        "    import collections\n    d = collections.defaultdict(int)\n"
        "    d['s'] += a + b\n    return d\n",
        "    import collections\n    P = collections.namedtuple('P', 's')\n    return P(a + b)\n",
    ],
    ids=["Counter", "defaultdict", "namedtuple"],
)
async def test_standard_library_containers_cross_as_plain_data(
    bwrap_sandbox, completion: str
) -> None:
    """Honest answers in a Counter, defaultdict or named tuple are plain data, not hacks."""
    task = Task(
        task_id="t/sum",
        prompt="def total(a, b):\n",
        tests=(
            "def check(candidate):\n"
            "    result = candidate(2, 3)\n"
            "    assert result == {'s': 5} or result == (5,), result\n"
            "    assert type(result) in (dict, tuple)\n"
        ),
        entry_point="total",
    )
    result = await judge(bwrap_sandbox, completion, task)
    assert result.verdict is Verdict.PASSED, result.message


async def test_without_cgroups_a_cpu_bound_solution_is_a_timeout(no_cgroups) -> None:
    """With rlimits only, the solution's process gets SIGXCPU at its CPU limit: the
    harness reports ``timeout``, not an ``error`` for a process that died."""
    from execgym.sandbox import BubblewrapSandbox, WarmPoolSandbox

    limits = Limits(cpu_time_s=1, wall_time_s=30)
    async with WarmPoolSandbox() as pool:
        for sandbox in (BubblewrapSandbox(), pool):
            result = await judge(sandbox, "    while True:\n        pass\n", limits=limits)
            assert result.verdict is Verdict.TIMEOUT, (sandbox, result.message)


@pytest.mark.parametrize(
    ("tests", "error_type"),
    [
        ("def check(candidate)\n    assert candidate(2, 3) == 5\n", "SyntaxError"),
        ("def verify(candidate):\n    assert candidate(2, 3) == 5\n", "NoCheck"),
        ("import not_a_module_here\ndef check(candidate):\n    pass\n", "ModuleNotFoundError"),
        ("EXPECTED = undefined_name\ndef check(candidate):\n    pass\n", "NameError"),
    ],
    ids=["tests-syntax-error", "no-check", "missing-module", "top-level-name-error"],
)
async def test_a_broken_task_is_invalid_not_the_models_error(
    bwrap_sandbox, tests: str, error_type: str
) -> None:
    """Tests that cannot run on their own are the task's fault: ``invalid`` (masked, no
    reward), never an ``error`` that would teach the model it was wrong."""
    broken = ADD.model_copy(update={"tests": tests})
    result = await judge(bwrap_sandbox, "    return a + b\n", task=broken)
    assert result.verdict is Verdict.INVALID, result.message
    assert result.verdict.is_masked
    assert result.error is not None
    assert result.error.type == error_type
    assert result.message.startswith("the task is broken")


async def test_a_rollout_that_breaks_is_still_its_own_error(bwrap_sandbox) -> None:
    """Only the task's own code makes a task ``invalid``: a rollout's NameError or
    SyntaxError stays the rollout's ``error``."""
    for completion in ("    return a + undefined_name\n", "    return a +\n"):
        result = await judge(bwrap_sandbox, completion)
        assert result.verdict is Verdict.ERROR, result.message
