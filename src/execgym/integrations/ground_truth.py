"""Trainers' ground-truth formats turned into execgym tasks.

Three formats arrive from trainers' data sets:

- verl / PRIME / LiveCodeBench style, a JSON string or a dict: ``{"inputs": [...],
  "outputs": [...]}`` for stdin/stdout, the same with ``"fn_name"`` for call-based tasks
  (each line of an input is one JSON argument, each output one JSON value), or
  ``{"assert_case": ["assert f(1) == 2", ...]}`` for assert statements;
- open-r1's ``verification_info``: ``{"language": ..., "test_cases": [{"input": ...,
  "output": ..., "type": "stdin_stdout"}]}``;
- execgym's own task record (``prompt``, ``tests``, ``entry_point``...).

Each becomes a task record (a dict in execgym's task schema) and then a
:class:`~execgym.tasks.models.Task`. Assert cases are judged by the assert judge here;
stdin/stdout and call-based records use the ``kind``, ``test_cases`` and ``fn_name``
fields of the stdio and function-call judges, and are refused with a clear error where
those judges are not installed.
"""

from __future__ import annotations

import ast
import hashlib
import json
from typing import Any

from pydantic import ValidationError

from execgym.errors import TaskError
from execgym.tasks.models import Task


def _decode(ground_truth: str | dict[str, Any]) -> dict[str, Any]:
    if isinstance(ground_truth, str):
        try:
            value = json.loads(ground_truth)
        except ValueError as error:
            raise TaskError(f"ground_truth is not JSON: {error}") from error
    else:
        value = ground_truth
    if not isinstance(value, dict):
        raise TaskError(
            f"ground_truth must be a JSON object, not {type(value).__name__}: give "
            '{"inputs": [...], "outputs": [...]} (with "fn_name" for call-based tasks) '
            'or {"assert_case": [...]}'
        )
    return value


def _called_names(source: str) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        called = isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        if called and node.func.id not in names:  # type: ignore[attr-defined]
            names.append(node.func.id)  # type: ignore[attr-defined]
    return names


def _defined_names(code: str) -> set[str]:
    try:  # the model's code is parsed as text, never run here
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return set()
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }


def assert_case_record(task_id: str, cases: list[str], code: str) -> dict[str, Any]:
    """An assert task from ``assert_case`` statements that call the solution by name.

    The entry point is the first function the statements call that ``code`` defines at
    top level (else the first one they call); tests that call several of the
    solution's functions are not supported (only the entry point is proxied).

    Raises:
        TaskError: if a statement is not Python, or no function is called.
    """
    if not cases or not all(isinstance(c, str) for c in cases):
        raise TaskError("assert_case must be a non-empty list of Python statements")
    body = "\n".join(cases)
    try:
        called = _called_names(body)
    except SyntaxError as error:
        raise TaskError(f"assert_case is not Python: {error}") from error
    defined = _defined_names(code)
    entry = next((name for name in called if name in defined), called[0] if called else None)
    if entry is None:
        raise TaskError("assert_case calls no function: cannot tell the entry point")
    indented = "".join(f"    {line}\n" for case in cases for line in case.splitlines())
    return {
        "task_id": task_id,
        "prompt": "",
        "tests": "def check(candidate):\n" + indented,
        "entry_point": entry,
    }


def _arguments(text: Any) -> list[Any]:
    if not isinstance(text, str):
        return [text]
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _expected(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def io_record(task_id: str, value: dict[str, Any]) -> dict[str, Any]:
    """A stdio or function-call task record from ``{"inputs", "outputs"[, "fn_name"]}``.

    Raises:
        TaskError: if inputs and outputs are missing, differ in length, or an input of
            a call-based task is not one JSON value per line.
    """
    inputs, outputs = value.get("inputs"), value.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise TaskError('ground_truth needs "inputs" and "outputs" lists')
    if len(inputs) != len(outputs):
        raise TaskError(f"ground_truth has {len(inputs)} inputs but {len(outputs)} outputs")
    fn_name = value.get("fn_name")
    if fn_name:
        try:
            cases = [
                {"args": _arguments(i), "expected": _expected(o)}
                for i, o in zip(inputs, outputs, strict=True)
            ]
        except ValueError as error:
            raise TaskError(
                f"a call-based input must hold one JSON argument per line: {error}"
            ) from error
        return {
            "task_id": task_id,
            "kind": "function_call",
            "fn_name": fn_name,
            "test_cases": cases,
        }
    cases = [{"input": str(i), "output": str(o)} for i, o in zip(inputs, outputs, strict=True)]
    return {"task_id": task_id, "kind": "stdio", "test_cases": cases}


def verification_info_record(task_id: str, info: dict[str, Any]) -> dict[str, Any]:
    """An open-r1 ``verification_info`` as a task record.

    Raises:
        TaskError: for a case type other than ``stdin_stdout``, or no cases.
    """
    cases = info.get("test_cases")
    if not isinstance(cases, list) or not cases:
        raise TaskError("verification_info needs a non-empty test_cases list")
    kinds = {str(c.get("type", "stdin_stdout")) for c in cases if isinstance(c, dict)}
    if kinds != {"stdin_stdout"}:
        raise TaskError(f"verification_info test case types {sorted(kinds)}: only stdin_stdout")
    return {
        "task_id": task_id,
        "kind": "stdio",
        "language": str(info.get("language", "python")).lower(),
        "test_cases": [
            {"input": str(c.get("input", "")), "output": str(c["output"])} for c in cases
        ],
    }


def task_id_for(data: Any) -> str:
    """A stable id for a ground truth without one (a hash of its JSON)."""
    text = json.dumps(data, sort_keys=True, default=str)
    return "gt/" + hashlib.sha256(text.encode()).hexdigest()[:16]


def record_from_ground_truth(
    ground_truth: str | dict[str, Any], code: str, task_id: str | None = None
) -> dict[str, Any]:
    """The task record for a verl-style ground truth (see the module docstring).

    Raises:
        TaskError: naming what is wrong with ``ground_truth``.
    """
    value = _decode(ground_truth)
    task_id = task_id or task_id_for(value)
    if "verification_info" in value:
        return verification_info_record(task_id, _decode(value["verification_info"]))
    if "test_cases" in value:
        return verification_info_record(task_id, value)
    if "assert_case" in value:
        return assert_case_record(task_id, value["assert_case"], code)
    if "tests" in value and "entry_point" in value:
        return {"task_id": task_id, "prompt": "", **value}
    return io_record(task_id, value)


def task_from_record(record: dict[str, Any]) -> Task:
    """Validate a task record.

    Raises:
        TaskError: if the record is invalid, or needs a judge that is not installed
            (stdin/stdout and call-based tasks need the stdio and function-call judges).
    """
    kind = record.get("kind", "assert")
    if kind != "assert" and "kind" not in Task.model_fields:
        raise TaskError(
            f"a {kind} task needs execgym's {kind} judge, which this installation does "
            "not have yet; only assert tasks ({'assert_case': [...]}) can be judged"
        )
    try:
        return Task.model_validate(record)
    except ValidationError as error:
        raise TaskError(f"invalid task from ground truth: {error}") from error
