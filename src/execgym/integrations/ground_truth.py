"""Trainers' ground-truth formats turned into execgym tasks.

The shapes that arrive from trainers' data sets, each a JSON string or a dict:

- verl / PRIME / LiveCodeBench: ``{"inputs": [...], "outputs": [...]}`` for
  stdin/stdout; the same with ``"fn_name"`` for call-based tasks, where each input is a
  string holding one JSON argument per line and each output a JSON string;
- APPS / TACO raw call-based (``input_output`` decoded): ``{"fn_name": "add",
  "inputs": [[1, 2], ...], "outputs": [[3], ...]}``: each input is the **list of
  arguments** (spread: ``add(1, 2)``, as APPS's ``testing_util.py`` calls
  ``method(*inputs)``), each output the return value wrapped in a one-element list
  (APPS's convention; unwrapped here, a bare value is taken as is). The function is a
  top-level function or a method of ``class Solution`` (LeetCode style);
- verl ``{"assert_case": ["assert f(1) == 2", ...]}``: assert statements run in the
  solution's module (see :func:`assert_case_record`);
- open-r1's ``verification_info``: ``{"language": ..., "test_cases": [{"input": ...,
  "output": ..., "type": "stdin_stdout"}]}`` (also nested under ``verification_info``);
- Hugging Face's ``openai_humaneval`` columns: ``{"prompt", "test", "entry_point"}``
  (``test`` defines ``check(candidate)``; ``prompt``, the signature and its imports,
  is put before the completion); LeetCodeDataset's rows have the same columns, with
  ``entry_point`` ``"Solution().twoSum"``;
- Hugging Face's ``mbpp`` columns: ``{"test_list": [...]}`` with ``test_setup_code``
  (full) or ``test_imports`` (sanitized), and ``challenge_test_list`` (added);
- execgym's own task record (``prompt``, ``tests``, ``entry_point``...).

Each becomes a task record (a dict in execgym's task schema) and then a
:class:`~execgym.tasks.models.Task`.
"""

from __future__ import annotations

import ast
import hashlib
import json
import sys
from typing import Any

from pydantic import ValidationError

from execgym.errors import TaskError
from execgym.tasks.datasets import imported_modules, with_python_libraries
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


def _arguments(value: Any) -> list[Any]:
    """A case's arguments.

    One JSON value per line of a string (verl / PRIME), or an APPS / TACO list of
    arguments, spread as APPS's ``method(*inputs)``; any other value is one argument.
    """
    if isinstance(value, list):
        return list(value)
    if not isinstance(value, str):
        return [value]
    return [json.loads(line) for line in value.splitlines() if line.strip()]


def _expected(value: Any, *, apps: bool) -> Any:
    """A case's expected return value.

    A JSON string (verl / PRIME), or an APPS / TACO value (``apps``), where a
    one-element list is the return value wrapped (APPS's convention).
    """
    if apps and isinstance(value, list) and len(value) == 1:
        return value[0]
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


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
                {"args": _arguments(i), "expected": _expected(o, apps=not isinstance(i, str))}
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
    if "test_list" in value:
        return mbpp_record(task_id, value, code)
    if "test" in value and "entry_point" in value:
        return humaneval_record(task_id, value)
    if "tests" in value and "entry_point" in value:
        return {"task_id": task_id, "prompt": "", **value}
    if "inputs" not in value and "input_output" in value:
        return io_record(task_id, _decode(value["input_output"]))
    return io_record(task_id, value)


def humaneval_record(task_id: str, row: dict[str, Any]) -> dict[str, Any]:
    """A task from Hugging Face ``openai_humaneval`` columns (or LeetCodeDataset's).

    ``prompt``, ``test``, ``entry_point``; ``task_id`` is kept when present. A
    LeetCodeDataset entry point, ``"Solution().twoSum"``, names a method of the
    solution's ``class Solution``; a prompt importing third-party modules gets the
    host's site-packages (as :mod:`execgym.tasks.datasets.leetcode` does).

    Raises:
        TaskError: if ``test`` or ``entry_point`` is not a string.
    """
    test, entry_point = row.get("test"), row.get("entry_point")
    if not isinstance(test, str) or not isinstance(entry_point, str):
        raise TaskError("a HumanEval row needs the string columns test and entry_point")
    given = row.get("prompt")
    prompt = given if isinstance(given, str) else ""
    if "(" in entry_point:  # LeetCodeDataset: "Solution().twoSum", a method of Solution
        entry_point = entry_point.rsplit(".", 1)[-1].strip()
    third_party = [m for m in imported_modules(prompt) if m not in sys.stdlib_module_names]
    if third_party:  # LeetCodeDataset's preamble imports sortedcontainers: the host's
        prompt = with_python_libraries(prompt)  # site-packages, as its loader does
    return {
        "task_id": str(row.get("task_id") or task_id),
        "prompt": prompt,
        "tests": test,
        "entry_point": entry_point,
    }


def mbpp_record(task_id: str, row: dict[str, Any], code: str) -> dict[str, Any]:
    """A task from Hugging Face ``mbpp`` columns.

    The asserts of ``test_list`` (and ``challenge_test_list``), after ``test_imports``
    (sanitized) or ``test_setup_code`` (full).

    Raises:
        TaskError: if ``test_list`` is not a non-empty list of statements.
    """
    tests = row.get("test_list")
    if not isinstance(tests, list) or not tests:
        raise TaskError("an MBPP row needs a non-empty test_list column")
    setup = [str(line) for line in row.get("test_imports") or []]
    if isinstance(row.get("test_setup_code"), str) and row["test_setup_code"].strip():
        setup.append(row["test_setup_code"])
    challenge = row.get("challenge_test_list") or []
    record = assert_case_record(task_id, [*tests, *challenge], code)
    if setup:
        record["prompt"] = "\n".join(setup) + "\n"
    return record


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
