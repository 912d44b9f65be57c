"""Schema check: the fields are there, the code parses, the entry point exists.

Required fields and their types are already enforced when a task is loaded
(:class:`execgym.tasks.Task`); a line that fails there reaches the report as a
``schema`` failure with the loader's message. This check adds what pydantic cannot
see: the prompt and the reference parse, the reference defines the entry point, and
the tests parse and define ``check``.
"""

from __future__ import annotations

from execgym.tasks.models import Task
from execgym.validation._source import defines, parse, reference_program
from execgym.validation.base import CheckResult, Outcome

NAME = "schema"


def check(task: Task) -> CheckResult:
    """Check ``task``'s shape; a failure here skips every check that runs code."""
    problems: list[str] = []
    if not task.reference or not task.reference.strip():
        problems.append("no reference solution: add a 'reference' (a correct completion)")
    else:
        try:
            program = parse(reference_program(task).source, "prompt + reference")
            if not defines(program, task.entry_point or ""):
                problems.append(
                    f"entry point {task.entry_point!r} is not defined by prompt + reference"
                )
        except SyntaxError as error:
            problems.append(str(error))
    try:
        if not defines(parse(task.tests or "", "tests"), "check"):
            problems.append("tests do not define check(candidate)")
    except SyntaxError as error:
        problems.append(str(error))
    if problems:
        return CheckResult(NAME, Outcome.FAIL, "; ".join(problems))
    return CheckResult(NAME, Outcome.PASS)


def load_failure(message: str) -> CheckResult:
    """The schema failure for a task line the loader rejected."""
    return CheckResult(NAME, Outcome.FAIL, message)
