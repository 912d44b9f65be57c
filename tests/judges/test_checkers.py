"""Checkers of stdio tasks: testlib's exit codes, crashes on the rollout's output, testlib.h.

Exit codes mirror testlib's ``TResult`` (github.com/MikeMirzayanov/testlib 1e4e8a24c79c,
``testlib.h``: ``_ok`` 0, ``_wa`` 1, ``_pe`` 2, ``_fail`` 3, ``_dirt`` 4, ``POINTS_EXIT_CODE``
7, ``UNEXPECTED_EOF_EXIT_CODE`` 8). Issue 17: exit 2 (presentation error) was a masked
``sandbox_error``; issue 18: a checker crashing on unparsable output (``1 2 3``, prose,
invalid UTF-8) bought the rollout a mask. Nothing a rollout prints may turn its 0 into
``null``: only a checker that fails on the task's own expected output is masked.
"""

from __future__ import annotations

import hashlib

import pytest

from execgym.judges import Verdict
from execgym.judges.stdio import StdioJudge
from execgym.judges.stdio import testlib_header as vendored_testlib
from execgym.limits import Limits, MiB
from execgym.tasks import Task

FAST = Limits(wall_time_s=5, memory_bytes=256 * MiB)


def split_task(checker: dict) -> Task:
    """Print two non-negative integers summing to n (any split is right)."""
    return Task.model_validate(
        {
            "task_id": "t/split",
            "kind": "stdio",
            "test_cases": [
                {"input": "7\n", "output": "3 4\n"},
                {"input": "10\n", "output": "5 5\n"},
            ],
            "checker": checker,
        }
    )


async def judge(sandbox, builder, completion: str, task: Task):
    return await StdioJudge(builder).judge(task, completion, sandbox, FAST)


def printing(text: str | bytes) -> str:
    """A Python solution that reads n and writes ``text`` (bytes: raw) as its output."""
    data = text if isinstance(text, bytes) else text.encode()
    return f"input()\nimport sys\nsys.stdout.buffer.write({data!r})\n"


RIGHT = "n = int(input())\nprint(n // 2, n - n // 2)\n"

# A checker in the execgym interface that exits with the code its rollout asks for, once
# the output is not a right answer: shows how each code is read.
EXIT_WITH = """
import sys
given, expected, actual = (open(name, encoding="utf-8", errors="replace").read()
                           for name in sys.argv[1:4])
words = actual.split()
if len(words) == 2 and all(w.isdigit() for w in words) and sum(map(int, words)) == int(given):
    sys.exit(0)
sys.exit(int(words[1]) if len(words) > 1 and words[0] == "exit" else 1)
"""


@pytest.mark.parametrize(
    ("code", "verdict", "said"),
    [
        (1, Verdict.FAILED, "wrong answer"),
        (2, Verdict.FAILED, "presentation error"),  # was sandbox_error (masked)
        (4, Verdict.FAILED, "_dirt"),
        (7, Verdict.FAILED, "partial points"),
        (8, Verdict.FAILED, "unexpected end"),
        (3, Verdict.FAILED, "accepts the task's expected output"),  # _fail on this output only
        (5, Verdict.FAILED, "accepts the task's expected output"),
        (139, Verdict.FAILED, "accepts the task's expected output"),
    ],
)
async def test_checker_exit_codes_have_testlibs_meaning(
    bwrap_sandbox, builder, code: int, verdict: Verdict, said: str
) -> None:
    task = split_task({"source": EXIT_WITH})
    assert (await judge(bwrap_sandbox, builder, RIGHT, task)).verdict is Verdict.PASSED
    judgement = await judge(bwrap_sandbox, builder, printing(f"exit {code}\n"), task)
    assert judgement.verdict is verdict, judgement.message
    assert said in judgement.message


# The naive checker of issue 18: it assumes the output parses as two integers.
NAIVE_PYTHON = """
import sys
given, expected, actual = (open(name).read() for name in sys.argv[1:4])
a, b = map(int, actual.split())
sys.exit(0 if a + b == int(given) and a >= 0 and b >= 0 else 1)
"""
NAIVE_C = r"""
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    FILE *in = fopen(argv[1], "r"), *out = fopen(argv[3], "r");
    int n, a, b; char extra[2];
    if (fscanf(in, "%d", &n) != 1) return 3;
    if (fscanf(out, "%d %d", &a, &b) != 2) abort();            /* crashes: SIGABRT */
    if (fscanf(out, "%1s", extra) == 1) { int *p = 0; return *p; } /* crashes: SIGSEGV */
    return a + b == n && a >= 0 && b >= 0 ? 0 : 1;
}
"""
UNPARSABLE = [
    "1 2 3\n",
    "The answer is three and four.\n",
    b"\xff\xfe\x80 3 4\n",  # invalid UTF-8
    "",
    "3\n",
    "-\n",
]


@pytest.mark.parametrize("output", UNPARSABLE, ids=repr)
@pytest.mark.parametrize(("language", "source"), [("python", NAIVE_PYTHON), ("c", NAIVE_C)])
async def test_a_checker_crashing_on_the_rollouts_output_is_a_wrong_answer_not_a_mask(
    bwrap_sandbox, builder, language: str, source: str, output: str | bytes
) -> None:
    task = split_task({"language": language, "source": source})
    assert (await judge(bwrap_sandbox, builder, RIGHT, task)).verdict is Verdict.PASSED
    judgement = await judge(bwrap_sandbox, builder, printing(output), task)
    assert judgement.verdict is Verdict.FAILED, judgement.message
    assert judgement.error is not None
    assert judgement.error.type == "WrongAnswer"


@pytest.mark.parametrize(
    ("language", "source"),
    [
        ("python", "raise RuntimeError('checker bug')"),
        ("python", "import sys; sys.exit(3)"),
        ("c", "#include <stdlib.h>\nint main(void) { abort(); }\n"),
    ],
)
async def test_a_checker_that_fails_on_the_expected_output_is_masked_as_the_tasks_fault(
    bwrap_sandbox, builder, language: str, source: str
) -> None:
    task = split_task({"language": language, "source": source})
    judgement = await judge(bwrap_sandbox, builder, printing("1 2 3\n"), task)
    assert judgement.verdict is Verdict.INVALID, judgement.message  # the task's fault
    assert judgement.run is not None
    assert "fails on the task's expected output too" in judgement.message


async def test_a_reference_check_that_does_not_finish_is_a_sandbox_error(
    bwrap_sandbox, builder
) -> None:
    """Out of time on the expected output: the host's load may be to blame, so the
    result is masked as ours (retried, never counted by a breaker), not the task's."""
    source = (
        "import sys, time\n"
        "expected, actual = (open(n).read() for n in sys.argv[2:4])\n"
        "if expected == actual:\n    time.sleep(60)\nsys.exit(3)\n"
    )
    task = split_task({"source": source})
    limits = Limits(wall_time_s=1, memory_bytes=256 * MiB)
    judgement = await StdioJudge(builder).judge(task, printing("1 2 3\n"), bwrap_sandbox, limits)
    assert judgement.verdict is Verdict.SANDBOX_ERROR, judgement.message
    assert "did not finish" in judgement.message


async def test_a_checker_is_not_held_to_the_rollouts_case_time_limit(
    bwrap_sandbox, builder
) -> None:
    source = "import time\ntime.sleep(1.5)\n"  # accepts, slowly
    task = split_task({"source": source}).model_copy(update={"case_time_limit_s": 0.5})
    judgement = await judge(bwrap_sandbox, builder, RIGHT, task)
    assert judgement.verdict is Verdict.PASSED, judgement.message


async def test_the_reference_check_is_done_once_per_checker_and_case(
    bwrap_sandbox, builder
) -> None:
    judge_ = StdioJudge(builder)
    task = split_task({"source": NAIVE_PYTHON})
    for output in ("1 2 3\n", "prose\n"):
        judgement = await judge_.judge(task, printing(output), bwrap_sandbox, FAST)
        assert judgement.verdict is Verdict.FAILED
    assert len(judge_._reference_checks) == 2  # two cases, each probed once
    assert set(judge_._reference_checks.values()) == {""}


TESTLIB_CHECKER = r"""
#include "testlib.h"

int main(int argc, char *argv[]) {
    registerTestlibCmd(argc, argv);
    int n = inf.readInt();
    int ja = ans.readInt(), jb = ans.readInt();
    int a = ouf.readInt(0, n, "a"), b = ouf.readInt(0, n, "b");
    if (a + b != n)
        quitf(_wa, "sum %d, jury's %d", a + b, ja + jb);
    quitf(_ok, "%d = %d + %d", n, a, b);
}
"""


def test_the_vendored_testlib_is_upstreams() -> None:
    # vendor/SOURCE.md: testlib.h of github.com/MikeMirzayanov/testlib at 1e4e8a24c79c.
    digest = hashlib.sha256(vendored_testlib()).hexdigest()
    assert digest == "bb323e3c89285214966076e0d23d5a295c5f6126da7ff198c1276ddb95ecb1a0"


@pytest.mark.timeout(300)  # the first compiles testlib.h at -O2: ~15 s idle, ~60 s under load
@pytest.mark.parametrize(
    ("completion", "verdict", "said"),
    [
        (RIGHT, Verdict.PASSED, ""),
        ("n = int(input())\nprint(0, n)\n", Verdict.PASSED, ""),
        ("n = int(input())\nprint(1, n)\n", Verdict.FAILED, "wrong answer"),  # _wa
        (printing("1 2 3\n"), Verdict.FAILED, "wrong answer"),
        (printing("3 4 5\n"), Verdict.FAILED, "presentation error"),  # _dirt, exits as _pe
        (printing("three four\n"), Verdict.FAILED, "presentation error"),  # _pe
        (printing(b"\xff\xfe 3 4\n"), Verdict.FAILED, "presentation error"),
        (printing("9 -2\n"), Verdict.FAILED, "wrong answer"),  # out of range: _wa
    ],
)
async def test_a_testlib_checker_works(
    bwrap_sandbox, builder, completion: str, verdict: Verdict, said: str
) -> None:
    task = split_task({"language": "cpp", "source": TESTLIB_CHECKER})
    assert task.checker is not None
    assert task.checker.argument_order == "testlib"
    judgement = await judge(bwrap_sandbox, builder, completion, task)
    assert judgement.verdict is verdict, judgement.message
    assert said in judgement.message
    if said == "wrong answer" and "1, n" in completion:
        # testlib's order (input, output, answer): ouf is the rollout's, ans the jury's.
        assert "sum 8, jury's 7" in judgement.message


def test_execgym_score_gives_unparsable_output_a_zero_not_a_mask(bwrap_sandbox, tmp_path) -> None:
    """Issue 18's hole end to end: through ``execgym score`` into results.jsonl."""
    import json

    from click.testing import CliRunner

    from execgym.cli import main
    from tests.conftest import write_jsonl

    task = split_task({"source": NAIVE_PYTHON}).model_dump(mode="json", exclude_none=True)
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [task])
    outputs = ["1 2 3\n", "The answer is three and four.\n", b"\xff\xfe 3 4\n"]
    rollouts = write_jsonl(
        tmp_path / "rollouts.jsonl",
        [{"task_id": "t/split", "completion": printing(o)} for o in outputs]
        + [{"task_id": "t/split", "completion": RIGHT}],
    )
    out = tmp_path / "results.jsonl"
    result = CliRunner().invoke(main, ["score", str(tasks), str(rollouts), "-o", str(out)])
    assert result.exit_code == 0, result.output
    results = sorted(map(json.loads, out.read_text().splitlines()), key=lambda r: r["index"])
    assert [(r["verdict"], r["reward"]) for r in results] == [
        ("failed", 0.0),
        ("failed", 0.0),
        ("failed", 0.0),
        ("passed", 1.0),
    ]
