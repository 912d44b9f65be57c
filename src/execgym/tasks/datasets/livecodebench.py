"""LiveCodeBench code-generation records (stdin and functional tests).

No copy is shipped; this reads records of the shape of ``livecodebench/
code_generation_lite`` (Jain et al. 2024, https://github.com/LiveCodeBench/LiveCodeBench,
MIT code; problems from LeetCode, AtCoder and Codeforces): ``question_id``,
``question_content``, ``platform``, ``starter_code``, ``public_test_cases`` (a JSON
string: a list of ``{"input", "output", "testtype"}``, testtype ``"stdin"`` or
``"functional"``), ``private_test_cases`` (the same list as JSON, either plain or as
upstream stores it: base64 of zlib of a pickled string) and ``metadata`` (a JSON string
with ``func_name`` for functional problems).

A functional test's input holds one JSON value per line, the arguments of
``Solution().<func_name>``, and its output one JSON value; stdin tests compare tokens.
Upstream's pickles are decoded with an unpickler that accepts only plain strings, so a
hostile record cannot run code here.
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import zlib
from typing import Any

from execgym.errors import TaskError
from execgym.tasks.models import Task


class _StringsOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise TaskError(f"private_test_cases pickle refers to {module}.{name}; refused")


def decode_test_cases(value: str | list[Any]) -> list[dict[str, Any]]:
    """The test cases of a ``public_test_cases`` or ``private_test_cases`` field.

    Raises:
        TaskError: if the field is neither JSON nor upstream's compressed pickle.
    """
    if isinstance(value, list):
        return value
    if not value.strip():
        return []
    try:
        cases = json.loads(value)
    except ValueError:
        try:
            raw = zlib.decompress(base64.b64decode(value))
            cases = json.loads(_StringsOnly(io.BytesIO(raw)).load())
        except (ValueError, zlib.error, pickle.UnpicklingError, TypeError, EOFError) as error:
            raise TaskError(
                f"test cases are neither JSON nor a compressed pickle: {error}"
            ) from error
    if not isinstance(cases, list):
        raise TaskError("test cases must be a list of {input, output, testtype}")
    return cases


def task_from_livecodebench(record: dict[str, Any], task_id: str | None = None) -> Task:
    """A ``stdio`` or ``function_call`` task from one LiveCodeBench record.

    Raises:
        TaskError: if its test cases cannot be read or mix test types.
        pydantic.ValidationError: if the result is not a valid task.
    """
    cases = decode_test_cases(record.get("public_test_cases", "[]"))
    cases += decode_test_cases(record.get("private_test_cases", "[]"))
    types = {case.get("testtype") for case in cases}
    if len(types) != 1:
        raise TaskError(f"expected one testtype over all cases, found {sorted(map(str, types))}")
    common: dict[str, Any] = {"task_id": task_id or str(record["question_id"])}
    if types == {"functional"}:
        metadata = record.get("metadata") or "{}"
        metadata = json.loads(metadata) if isinstance(metadata, str) else metadata
        if not metadata.get("func_name"):
            raise TaskError("a functional record needs metadata.func_name")
        calls = [
            {
                "args": [json.loads(line) for line in case["input"].splitlines() if line],
                "expected": json.loads(case["output"]),
            }
            for case in cases
        ]
        return Task.model_validate(  # the cases as JSON: the model validates them
            {
                "kind": "function_call",
                "prompt": record.get("starter_code", ""),
                "fn_name": metadata["func_name"],
                "test_cases": calls,
                **common,
            }
        )
    return Task.model_validate(
        {
            "kind": "stdio",
            "prompt": record.get("question_content", ""),
            "test_cases": [{"input": c["input"], "output": c["output"]} for c in cases],
            **common,
        }
    )
