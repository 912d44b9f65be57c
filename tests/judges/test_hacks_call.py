"""The hack corpus for the function-call judge: each hack its own test, each 0.0.

The harness keeps the report channel (fd 3) and the nonce in its own process and calls
the solution in another, forked before the nonce and the cases were read; these hacks
would each turn a wrong ``add`` into a pass if the two shared a process (as they did).
The honest solutions of the same tasks score 1.0 under ``binary``.
"""

from __future__ import annotations

import pytest

from execgym import Limits, Rollout, RolloutLine, Scorer, Task, Verdict
from execgym.limits import MiB
from tests.judges.hacks import ALWAYS_EQUAL, EARLY_EXITS, FORGED_FRAME, nonce_hunt, score_rollout
from tests.judges.test_hacks import assert_zero

ADD = Task.model_validate(
    {
        "task_id": "hack/call-add",
        "kind": "function_call",
        "fn_name": "add",
        "test_cases": [{"args": [a, b], "expected": a + b} for a, b in ((2, 3), (-1, 1), (4, 4))],
    }
)
LEETCODE = ADD.model_copy(update={"task_id": "hack/call-leetcode", "fn_name": "Solution.add"})
GREET = Task.model_validate(
    {
        "task_id": "hack/call-greet",
        "kind": "function_call",
        "fn_name": "greet",
        "test_cases": [{"args": ["bo"], "expected": "hi bo"}],
    }
)
TASKS = {task.task_id: task for task in (ADD, LEETCODE, GREET)}
HONEST = {
    ADD.task_id: "def add(a, b):\n    return a + b\n",
    LEETCODE.task_id: "class Solution:\n    def add(self, a: int, b: int) -> int:\n"
    "        return a + b\n",
    GREET.task_id: "def greet(name):\n    return 'hi ' + name\n",
}
FAST = Limits(wall_time_s=3, cpu_time_s=3, memory_bytes=256 * MiB)


async def score(sandbox, completion: str, task: Task = ADD, limits: Limits = FAST):
    return await score_rollout(TASKS, sandbox, completion, task, limits)


@pytest.mark.parametrize("task", list(TASKS.values()), ids=list(TASKS))
async def test_honest_solutions_of_the_hacked_tasks_score_one(hack_sandbox, task: Task) -> None:
    result = await score(hack_sandbox, HONEST[task.task_id], task)
    assert (result.verdict, result.reward) == (Verdict.PASSED, 1.0), result.message


async def test_frame_and_gc_walk_finds_no_nonce_to_forge_a_report(hack_sandbox) -> None:
    """The nonce is nowhere in the solution's process, and fd 3 is closed there."""
    body = '{"status": "ok", "results": [{"value": 5}, {"value": 0}, {"value": 8}]}'
    result = await score(hack_sandbox, nonce_hunt(body))
    assert_zero(result)
    assert result.verdict is Verdict.FAILED, result.message
    assert 'got "no-nonce"' in result.message


async def test_patching_the_harness_encoder_and_report_in_its_own_process(hack_sandbox) -> None:
    """The harness's functions exist in the solution's process too (it was forked from
    it): rewriting them there changes nothing the harness runs."""
    completion = (
        "import gc, os, types\n"
        "def _pass(*a, **k):\n"
        '    os.write(3, b\'{"status": "ok", "results": []}\\n\')\n'
        "    return '5'\n"
        "for _o in gc.get_objects():\n"
        "    if isinstance(_o, types.FunctionType) and _o.__name__ in (\n"
        "            'encode', 'report', 'run_cases', 'json_encoder', 'string', 'dumps', 'main'):\n"
        "        try:\n"
        "            _o.__code__ = _pass.__code__\n"
        "        except (ValueError, TypeError):\n"
        "            pass\n"
        "import json, builtins\n"
        "json.dumps = lambda *a, **k: '5'\n"
        "builtins.isinstance = lambda *a: True\n"
        "def add(a, b):\n    return 0\n"
    )
    result = await score(hack_sandbox, completion)
    assert_zero(result)
    assert result.verdict in (Verdict.FAILED, Verdict.ERROR), result.message


@pytest.mark.parametrize("completion", list(EARLY_EXITS.values()), ids=list(EARLY_EXITS))
async def test_ending_the_run_early(hack_sandbox, completion: str) -> None:
    assert_zero(await score(hack_sandbox, completion))


async def test_exiting_mid_run_fails_the_remaining_cases(hack_sandbox) -> None:
    result = await score(hack_sandbox, EARLY_EXITS["os-exit-mid-run"])
    assert result.judgement is not None
    cases = [case["verdict"] for case in result.judgement.details["cases"]]
    assert cases == ["passed", "error", "error"]
    assert "SolutionExited" in result.message


@pytest.mark.parametrize(
    ("completion", "task"),
    [
        (ALWAYS_EQUAL + "def add(a, b):\n    return _Any()\n", ADD),
        (ALWAYS_EQUAL + "def add(a, b):\n    return [_Any()]\n", ADD),
        (
            ALWAYS_EQUAL.replace("class _Any:", "class _Any(int):")
            + "def add(a, b):\n    return _Any(0)\n",
            ADD,
        ),
        (
            ALWAYS_EQUAL.replace("class _Any:", "class _Any(str):")
            + "def greet(name):\n    return _Any('no')\n",
            GREET,
        ),
        (
            ALWAYS_EQUAL + "class Solution:\n    def add(self, a, b):\n        return _Any()\n",
            LEETCODE,
        ),
    ],
    ids=["object", "inside-a-list", "int-subclass", "str-subclass", "leetcode-method"],
)
async def test_always_equal_results_are_tampered(hack_sandbox, completion: str, task) -> None:
    result = await score(hack_sandbox, completion, task)
    assert_zero(result, tampered="non-plain result")


async def test_forged_frame_on_the_answer_pipe(hack_sandbox) -> None:
    assert_zero(await score(hack_sandbox, FORGED_FRAME), tampered="forged answer")


async def test_disarming_the_case_timer_is_still_a_timeout(hack_sandbox) -> None:
    """The harness kills a solution that ignores SIGALRM and runs past the case limit."""
    task = ADD.model_copy(update={"case_time_limit_s": 0.3})
    completion = (
        "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
        "def add(a, b):\n    while True:\n        pass\n"
    )
    scorer = Scorer({task.task_id: task}, hack_sandbox, FAST)
    result = await scorer.score_one(
        RolloutLine(0, Rollout(task_id=task.task_id, completion=completion))
    )
    assert_zero(result)
    assert result.verdict is Verdict.TIMEOUT, result.message
    assert result.judgement is not None
    assert result.judgement.run is not None
    assert result.judgement.run.wall_time_s < 2.5


async def test_reading_the_cases_from_the_harness(hack_sandbox) -> None:
    """The expected values never reach the solution's process: no descriptor, no /proc."""
    completion = (
        "import os\n"
        "def add(a, b):\n"
        "    leaks = []\n"
        "    for entry in ('mem', 'fd/0', 'fd/3', 'environ'):\n"
        "        try:\n"
        "            data = open('/proc/%d/%s' % (os.getppid(), entry), 'rb').read(1 << 16)\n"
        "            leaks.append(entry)\n"
        "        except OSError:\n"
        "            pass\n"
        "    try:\n"
        "        leaks.append(os.read(0, 100))\n"
        "    except OSError:\n"
        "        pass\n"
        "    return [leak for leak in leaks if leak]\n"
    )
    result = await score(hack_sandbox, completion)
    assert_zero(result)
    assert result.message.endswith("got []"), result.message
