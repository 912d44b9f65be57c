"""Trivial-solution check: tests that a do-nothing solution passes are broken.

Each candidate is judged like a rollout: an empty body (``pass``), ``return None``,
return the first argument, ``raise NotImplementedError``, and the prompt alone (the
empty completion). Any of them passing fails the task, naming which.
"""

from __future__ import annotations

import ast
import asyncio

from execgym.judges.base import Verdict
from execgym.tasks.models import Task
from execgym.validation._source import entry_function
from execgym.validation.base import CheckResult, Context, Outcome, entry_point

NAME = "trivial"


def candidates(task: Task) -> dict[str, str]:
    """The trivial completions for ``task``: ``{name: completion}``."""
    indent = " " * 4
    first_arg = None
    try:
        function = entry_function(ast.parse(task.prompt), entry_point(task))
    except SyntaxError:
        function = None
    if function is not None:
        indent = " " * (function.col_offset + 4)
        params = [*function.args.posonlyargs, *function.args.args]
        first_arg = params[0].arg if params else None
    found = {
        "empty body": f"{indent}pass\n",
        "return None": f"{indent}return None\n",
        "raise NotImplementedError": f"{indent}raise NotImplementedError\n",
        "prompt alone": "",
    }
    if first_arg is not None:
        found["return first argument"] = f"{indent}return {first_arg}\n"
    return found


async def check(task: Task, ctx: Context) -> CheckResult:
    """Fail if any trivial completion passes the tests."""
    limits = task.limits_over(ctx.limits)
    named = candidates(task)
    judgements = await asyncio.gather(
        *(ctx.judge_completion(task, completion, limits) for completion in named.values())
    )
    verdicts = {name: j.verdict.value for name, j in zip(named, judgements, strict=True)}
    passed = [
        name for name, j in zip(named, judgements, strict=True) if j.verdict is Verdict.PASSED
    ]
    if passed:
        return CheckResult(
            NAME,
            Outcome.FAIL,
            f"the tests pass for trivial solutions: {', '.join(passed)}",
            {"verdicts": verdicts},
        )
    return CheckResult(NAME, Outcome.PASS, details={"verdicts": verdicts})
