"""Duplicate check across the set: the same task twice, or nearly.

Each task's prompt and reference are normalized: parsed, docstrings and comments
removed, unparsed (so formatting does not count), lower-cased, whitespace collapsed;
a prompt that does not parse is only lower-cased and collapsed. Two tasks whose
normalized prompt + reference are equal are duplicates; with a Jaccard similarity of
their character 3-gram shingles of at least ``near_duplicate_similarity``, near
duplicates. The first task of a pair (in input order) is kept; the later one fails,
naming the first.
"""

from __future__ import annotations

import ast
import re

from execgym.tasks.models import Task
from execgym.validation._source import reference_program
from execgym.validation.base import CheckResult, Outcome

NAME = "duplicates"


def _strip_docstrings(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            if len(body) == 1:
                body[0] = ast.Pass()
            else:
                del body[0]


def normalize(task: Task) -> str:
    """The text duplicates are compared on (see the module docstring)."""
    source = reference_program(task).source if task.reference else task.prompt
    docstrings = " ".join(re.findall(r'"""(.*?)"""', task.prompt, flags=re.S))
    try:
        tree = ast.parse(source)
        _strip_docstrings(tree)
        code = ast.unparse(tree)
    except SyntaxError:
        code = source
    return re.sub(r"\s+", " ", f"{docstrings} {code}".lower()).strip()


def _shingles(text: str) -> set[str]:
    return {text[i : i + 3] for i in range(max(1, len(text) - 2))}


def check_all(tasks: list[Task], similarity: float) -> dict[str, CheckResult]:
    """The duplicate finding for every task, by ``task_id``."""
    normal = [normalize(t) for t in tasks]
    shingles = [_shingles(n) for n in normal]
    results: dict[str, CheckResult] = {}
    for j, task in enumerate(tasks):
        match = None
        for i in range(j):
            if normal[i] == normal[j]:
                match = (tasks[i].task_id, 1.0)
                break
            small, large = sorted((len(shingles[i]), len(shingles[j])))
            if large and small / large < similarity:
                continue  # Jaccard <= |small| / |large|: cannot reach the threshold
            score = len(shingles[i] & shingles[j]) / len(shingles[i] | shingles[j])
            if score >= similarity:
                match = (tasks[i].task_id, score)
                break
        if match is None:
            results[task.task_id] = CheckResult(NAME, Outcome.PASS)
        else:
            kind = "duplicate" if match[1] == 1.0 else "near-duplicate"
            results[task.task_id] = CheckResult(
                NAME,
                Outcome.FAIL,
                f"{kind} of {match[0]} (similarity {match[1]:.2f})",
                {"of": match[0], "similarity": round(match[1], 4)},
            )
    return results
