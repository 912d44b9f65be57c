"""APPS, TACO and CodeContests records (stdin/stdout and ``fn_name`` tasks).

No copy of these data sets is shipped; these functions read records of the shapes their
authors publish (one JSON object per line, as exported from the Hugging Face data sets):

- APPS (Hendrycks et al. 2021, https://github.com/hendrycks/apps, MIT) and TACO (Li et
  al. 2023, https://huggingface.co/datasets/BAAI/TACO, Apache-2.0): ``question``,
  ``solutions`` (a JSON string: a list of Python programs), ``input_output`` (a JSON
  string: ``{"inputs": [...], "outputs": [...]}`` plus ``"fn_name"`` for call-based
  tasks), ``starter_code``; APPS also has ``problem_id``. A stdin task's inputs and
  outputs are strings (an output may be a list of lines, joined here); a call-based
  task's inputs are argument lists.
- CodeContests (Li et al. 2022, https://github.com/google-deepmind/code_contests,
  CC-BY-4.0): ``name``, ``description``, ``public_tests``/``private_tests``/
  ``generated_tests`` as ``{"input": [...], "output": [...]}``, ``solutions`` as
  ``{"language": [...], "solution": [...]}`` (language 3 is Python 3, 2 C++, 4 Java),
  ``time_limit`` as ``{"seconds", "nanos"}`` and ``memory_limit_bytes``.

Quirk kept as is: APPS's own harness also accepts a call-based result equal to the
first element of a one-element expected list (``[x]`` for ``x``); here ``expected`` is
taken literally, so such a task's reference may fail and the task needs fixing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from execgym.errors import TaskError
from execgym.tasks.loaders import LineProblem, read_jsonl
from execgym.tasks.models import Task

CODECONTESTS_LANGUAGES = {1: "python", 2: "cpp", 3: "python", 4: "java"}
"""CodeContests' solution language enum -> our language (1 is Python 2, run as 3)."""


def _json_field(record: dict[str, Any], name: str, default: Any) -> Any:
    value = record.get(name, default)
    if isinstance(value, str):
        if not value.strip():
            return default
        try:
            return json.loads(value)
        except ValueError as error:
            raise TaskError(f"`{name}` is not valid JSON ({error})") from error
    return value


def _text(value: Any) -> str:
    if isinstance(value, list):
        return "\n".join(str(v) for v in value) + "\n"
    return str(value)


def task_from_apps(record: dict[str, Any], task_id: str) -> Task:
    """A task from one APPS or TACO record; a ``fn_name`` makes it ``function_call``.

    Raises:
        TaskError: if ``input_output`` is missing or malformed.
        pydantic.ValidationError: if the result is not a valid task.
    """
    io = _json_field(record, "input_output", {})
    if not isinstance(io, dict) or "inputs" not in io or "outputs" not in io:
        raise TaskError("`input_output` must hold {'inputs': [...], 'outputs': [...]}")
    if len(io["inputs"]) != len(io["outputs"]):
        raise TaskError("`input_output` has different numbers of inputs and outputs")
    solutions = _json_field(record, "solutions", [])
    common: dict[str, Any] = {
        "task_id": task_id,
        "reference": solutions[0] if solutions else None,
    }
    fn_name = io.get("fn_name")
    if fn_name:
        cases = [
            {"args": args if isinstance(args, list) else [args], "expected": expected}
            for args, expected in zip(io["inputs"], io["outputs"], strict=True)
        ]
        return Task.model_validate(  # the cases as JSON: the model validates them
            {
                "kind": "function_call",
                "prompt": record.get("starter_code") or "",
                "fn_name": fn_name,
                "test_cases": cases,
                **common,
            }
        )
    cases = [
        {"input": _text(given), "output": _text(expected)}
        for given, expected in zip(io["inputs"], io["outputs"], strict=True)
    ]
    return Task.model_validate(
        {"kind": "stdio", "prompt": record.get("question", ""), "test_cases": cases, **common}
    )


def task_from_codecontests(record: dict[str, Any], task_id: str | None = None) -> Task:
    """A ``stdio`` task from one CodeContests record (public, private and generated tests).

    The reference is the first Python 3 solution, or else the first C++ or Java one; the
    per-case time limit is the problem's ``time_limit``.

    Raises:
        TaskError: if the record has no tests.
        pydantic.ValidationError: if the result is not a valid task.
    """
    cases = []
    for split in ("public_tests", "private_tests", "generated_tests"):
        tests = record.get(split) or {}
        for given, expected in zip(tests.get("input", []), tests.get("output", []), strict=True):
            cases.append({"input": given, "output": expected})
    if not cases:
        raise TaskError("the record has no public, private or generated tests")
    language, reference = _codecontests_reference(record.get("solutions") or {})
    limit = record.get("time_limit") or {}
    seconds = (limit.get("seconds") or 0) + (limit.get("nanos") or 0) / 1e9
    memory = record.get("memory_limit_bytes") or None
    return Task.model_validate(
        {
            "task_id": task_id or record["name"],
            "kind": "stdio",
            "language": language,
            "prompt": record.get("description", ""),
            "test_cases": cases,
            "reference": reference,
            "case_time_limit_s": seconds or None,
            "limits": {"memory_bytes": memory} if memory else None,
        }
    )


def _codecontests_reference(solutions: dict[str, Any]) -> tuple[str, str | None]:
    pairs = list(zip(solutions.get("language", []), solutions.get("solution", []), strict=True))
    for wanted in (3, 2, 4):
        for language, source in pairs:
            if language == wanted:
                return CODECONTESTS_LANGUAGES[wanted], source
    return "python", None


def read_records_file(
    path: str | Path, build: Any, prefix: str
) -> Iterator[tuple[str, Task] | LineProblem]:
    """Yield ``(task_id, task)`` per line of a JSONL file, or a problem for a bad line.

    ``build(record, task_id)`` makes the task; the id is the record's own (APPS
    ``problem_id``, CodeContests ``name``) or ``<prefix>/<index>``.

    Raises:
        TaskError: if the file cannot be opened.
    """
    for number, index, value in read_jsonl(path):
        if isinstance(value, LineProblem):
            yield value
            continue
        own = value.get("problem_id", value.get("name"))
        task_id = f"{prefix}/{own if own is not None else index}"
        try:
            yield task_id, build(value, task_id)
        except (TaskError, ValueError, KeyError, TypeError) as error:
            yield LineProblem(str(path), number, index, f"{prefix} record: {error}", task_id)
