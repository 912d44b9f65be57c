"""Reading a task's code on the host: parsing only, never running it."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from execgym.judges.assert_tests import build_program
from execgym.tasks.models import Task


@dataclass(frozen=True, slots=True)
class ReferenceProgram:
    """The reference solution as the judge runs it, and where the reference lies in it.

    Attributes:
        source: ``build_program(task, task.reference)``: prompt and reference.
        first_line: 1-based line of ``source`` where the reference's code starts.
        last_line: Last line of the reference in ``source``.
    """

    source: str
    first_line: int
    last_line: int

    def in_reference(self, line: int) -> bool:
        """Whether 1-based ``line`` of :attr:`source` belongs to the reference."""
        return self.first_line <= line <= self.last_line


def reference_program(task: Task) -> ReferenceProgram:
    """Locate the reference in the program the judge builds (the task needs one)."""
    reference = task.reference or ""
    source = build_program(task, reference)
    at = source.rfind(reference) if reference else len(source)
    first = source[:at].count("\n") + 1
    last = source.count("\n") + (0 if source.endswith("\n") else 1)
    return ReferenceProgram(source, first, max(first, last))


def parse(source: str, what: str) -> ast.Module:
    """Parse ``source``; raise ``SyntaxError`` whose message names ``what``."""
    try:
        return ast.parse(source)
    except SyntaxError as error:
        raise SyntaxError(f"{what} does not parse: {error.msg} (line {error.lineno})") from None


def entry_function(tree: ast.Module, entry_point: str) -> ast.FunctionDef | None:
    """The last top-level ``def`` named ``entry_point`` (the one that wins at run time)."""
    found = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == entry_point:
            found = node
    return found if isinstance(found, ast.FunctionDef) else None


def defines(tree: ast.Module, name: str) -> bool:
    """Whether the module binds ``name`` at top level (def, class, assignment, import)."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name == name:
                return True
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
        elif isinstance(node, ast.Import | ast.ImportFrom) and any(
            (alias.asname or alias.name) == name for alias in node.names
        ):
            return True
    return False


def candidate_calls(tests: str) -> list[str]:
    """The calls ``candidate(...)`` in the tests, as source text, in order, deduplicated.

    Calls whose arguments use names (a loop variable, a local) are left out: they
    cannot be evaluated on their own.
    """
    try:
        tree = ast.parse(tests)
    except SyntaxError:
        return []
    calls: dict[str, None] = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "candidate"
            and not any(isinstance(sub, ast.Name) for arg in node.args for sub in ast.walk(arg))
            and not node.keywords
        ):
            calls[ast.unparse(node)] = None
    return list(calls)
