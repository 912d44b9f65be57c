"""The comparison rules (execgym/judges/compare.py) through the stdio judge, in Python and C.

A program prints the bytes; the judge decodes and compares them. Each case was judged
wrongly before issue 17 (the expected output with a byte-order mark failed every
solution; the rest were accepted).
"""

from __future__ import annotations

import pytest

from execgym.judges import Verdict
from execgym.judges.stdio import StdioJudge
from execgym.limits import Limits, MiB
from execgym.tasks import Task
from tests.judges.test_languages import needs

LIMITS = Limits(wall_time_s=5, memory_bytes=256 * MiB)
FLOAT = {"float_abs_tol": 1e-6, "float_rel_tol": 1e-6}


def program(language: str, output: bytes) -> str:
    """A program that writes ``output`` byte for byte."""
    if language == "python":
        return f"import sys\nsys.stdout.buffer.write({output!r})\n"
    escaped = "".join(f"\\x{byte:02x}" for byte in output)
    return (
        "#include <stdio.h>\nint main(void) {\n"
        f'    static const char out[] = "{escaped}";\n'
        "    fwrite(out, 1, sizeof out - 1, stdout);\n    return 0;\n}\n"
    )


CASES = [
    # (expected, printed, comparison, verdict)
    ("\ufeff1 2\n", b"1 2\n", {}, Verdict.PASSED),  # expected output saved with a BOM
    ("1 2\n", b"\xef\xbb\xbf1 2\n", {}, Verdict.PASSED),
    ("1 2\n", "1\u00a02\n".encode(), {}, Verdict.FAILED),
    ("1 2\n", b"1\x1f2\n", {}, Verdict.FAILED),
    ("1 2\n", "1\u30002\n".encode(), FLOAT, Verdict.FAILED),
    ("10\n", "\u0661\u0660\n".encode(), FLOAT, Verdict.FAILED),
    ("10\n", "\uff11\uff10\n".encode(), FLOAT, Verdict.FAILED),
    ("1000000000000000000\n", b"999999999999999999\n", FLOAT, Verdict.FAILED),
    ("0.333333333\n", b"0.3333333334\n", FLOAT, Verdict.PASSED),
]


@pytest.mark.parametrize("language", ["python", "c"])
async def test_the_stdio_judge_compares_by_the_rules(bwrap_sandbox, builder, language: str) -> None:
    needs(language)
    judge = StdioJudge(builder)
    for expected, printed, comparison, verdict in CASES:
        task = Task.model_validate(
            {
                "task_id": "t/cmp",
                "kind": "stdio",
                "language": language,
                "test_cases": [{"input": "", "output": expected}],
                "comparison": comparison,
            }
        )
        judgement = await judge.judge(task, program(language, printed), bwrap_sandbox, LIMITS)
        assert judgement.verdict is verdict, (expected, printed, judgement.message)
