"""Description check: a non-empty prompt naming the entry point, examples that hold.

The prompt must be non-empty and name the entry point, and its examples must agree
with the reference.

Examples are read from the prompt in the forms HumanEval and MBPP use: doctest
(``>>> f(1)`` then the expected value on the next line), and one-line ``f(1) ➞ 2``,
``f(1) == 2``, ``f(1) => 2`` or ``f(1) -> 2``. Only calls of the entry point with literal
arguments whose expected value is a Python literal are checked (placeholders such as
``f(a) => False`` are skipped; other values are counted as unchecked). The
reference is called on them inside the sandbox; values are compared with ``==``, floats
to 1e-6.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass
from typing import Any

from execgym.tasks.models import Task
from execgym.validation._probe import probe
from execgym.validation._source import reference_program
from execgym.validation.base import CheckResult, Context, Outcome, entry_point

NAME = "description"
_ARROWS = r"(?:➞|==>|=>|->|==|→)"


@dataclass(frozen=True, slots=True)
class Example:
    """One example from the prompt: a call (of ``candidate``) and the value it shows."""

    call: str
    expected: str


def _to_candidate(expression: str, entry_point: str) -> str | None:
    text = expression.strip()
    if not text.startswith(entry_point + "("):
        return None
    call = "candidate" + text[len(entry_point) :]
    try:
        tree = ast.parse(call, mode="eval")
    except SyntaxError:
        return None
    if not isinstance(tree.body, ast.Call):
        return None
    arguments = [*tree.body.args, *(k.value for k in tree.body.keywords)]
    if any(isinstance(n, ast.Name) for a in arguments for n in ast.walk(a)):
        return None  # a placeholder such as `is_happy(a) => False`: not a runnable example
    return call


def examples(task: Task) -> list[Example]:
    """The examples in ``task``'s prompt (see the module docstring for the forms)."""
    found: list[Example] = []
    lines = task.prompt.splitlines()
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith(">>>"):
            call = _to_candidate(stripped[3:], entry_point(task))
            expected = lines[i + 1].strip() if i + 1 < len(lines) else ""
            if call and expected and not expected.startswith(">>>"):
                found.append(Example(call, expected))
            continue
        match = re.match(rf"^(.+?\))\s*{_ARROWS}\s*(.+?)\s*$", stripped)
        if match:
            call = _to_candidate(match.group(1), entry_point(task))
            if call:
                found.append(Example(call, match.group(2).rstrip(".,;")))
    return found


def example_calls(task: Task) -> list[str]:
    """Just the calls of :func:`examples`."""
    return [e.call for e in examples(task)]


def _literal(text: str) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False, None


def _agree(value: Any, expected: Any) -> bool:
    if isinstance(value, float) or isinstance(expected, float):
        try:
            return math.isclose(value, expected, rel_tol=1e-6, abs_tol=1e-6)
        except TypeError:
            return False
    if isinstance(value, list | tuple) and isinstance(expected, list | tuple):
        return len(value) == len(expected) and all(
            _agree(a, b) for a, b in zip(value, expected, strict=True)
        )
    return bool(value == expected)


def _static_problems(task: Task) -> list[str]:
    problems = []
    if not task.prompt.strip():
        problems.append("the prompt is empty")
    elif entry_point(task) not in task.prompt:
        problems.append(f"the prompt never names the entry point {task.entry_point!r}")
    return problems


async def check(task: Task, ctx: Context) -> CheckResult:
    """Fail on an empty prompt, a missing entry point, or an example the reference contradicts."""
    problems = _static_problems(task)
    if problems:
        return CheckResult(NAME, Outcome.FAIL, "; ".join(problems))
    checkable = [(e, value) for e in examples(task) for ok, value in [_literal(e.expected)] if ok]
    details: dict[str, Any] = {
        "examples": len(checkable),
        "unchecked": len(examples(task)) - len(checkable),
    }
    if not checkable:
        return CheckResult(NAME, Outcome.PASS, details=details)
    program = reference_program(task).source
    outcome = await probe(
        ctx, [program], entry_point(task), [e.call for e, _ in checkable], ctx.limits
    )
    if outcome is None or outcome[0] is None:
        return CheckResult(NAME, Outcome.WARN, "could not run the prompt's examples", details)
    wrong = []
    for (example, expected), got in zip(checkable, outcome[0], strict=True):
        ok, value = _literal(got)
        if not (ok and _agree(value, expected)):
            wrong.append(
                {"call": example.call, "prompt_says": example.expected, "reference_gives": got}
            )
    details["disagreeing"] = wrong
    if wrong:
        first = wrong[0]
        return CheckResult(
            NAME,
            Outcome.FAIL,
            f"{len(wrong)} of {len(checkable)} prompt example(s) disagree with the reference, "
            f"e.g. {first['call']} gives {first['reference_gives']}, the prompt says "
            f"{first['prompt_says']}",
            details,
        )
    return CheckResult(NAME, Outcome.PASS, details=details)
