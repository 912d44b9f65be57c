"""What a task's own test suite provably lacks, decided from the task alone (never run).

A suite that does not compile or holds no test is the task's fault: its rollouts are
``invalid`` (masked) with the reason, never ``error`` (see :mod:`execgym.judges.masking`). The
decision reads only the task's tests, parsed with :mod:`ast`, before any rollout runs,
so no rollout can reach it. It is conservative: a suite is called empty only when no
test could appear in it (no class that could be a test class, no star import, no name
bound to ``test*`` by an assignment or an import). A suite that has tests on paper but
collects none in the run is left to the run, where it stays ``error``: the rollout
could have caused that (it runs before the tests in the ``unittest`` judge, and a
``from solution import *`` can rebind a pytest test's name).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping


def _parse(source: str, name: str) -> ast.Module | str:
    try:
        return ast.parse(source, name)
    except (SyntaxError, ValueError) as error:
        return f"the task's tests in {name} do not compile ({type(error).__name__}: {error})"


def _binds(node: ast.stmt) -> Iterable[str]:
    """Names a statement binds at its own level (targets, imports, definitions)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        yield node.name
    elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            for leaf in ast.walk(target):
                if isinstance(leaf, ast.Name):
                    yield leaf.id
    elif isinstance(node, ast.Import | ast.ImportFrom):
        for alias in node.names:
            yield alias.asname or alias.name.split(".")[0]
    for field in ("body", "orelse", "finalbody", "handlers"):
        for child in getattr(node, field, None) or []:  # if/try/with blocks at this level
            if isinstance(child, ast.stmt | ast.excepthandler):
                yield from _binds(child)  # type: ignore[arg-type]


def _star_import(tree: ast.Module) -> bool:
    return any(
        isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names)
        for node in ast.walk(tree)
    )


def unittest_suite_problem(tests: str, class_name: str) -> str:
    """Why a ``unittest`` task's ``tests`` cannot run any test, or ``""``.

    Args:
        tests: The task's test code (the part after the solution).
        class_name: The test class the judge loads (``TestCases``).

    Returns:
        A reason when the tests do not compile, never bind ``class_name``, or define it
        as a class whose body and local bases hold no ``test*`` name (the default
        ``unittest.TestLoader.testMethodPrefix``); else ``""`` (tests exist on paper).
    """
    tree = _parse(tests, "the tests")
    if isinstance(tree, str):
        return tree
    if _star_import(tree):
        return ""
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    bound = [name for node in tree.body for name in _binds(node)]
    if class_name not in bound:
        return f"the task's tests define no test class {class_name}"
    if bound.count(class_name) > 1 or class_name not in classes:
        return ""  # bound some other way (an assignment, an import): only the run can tell

    def has_tests(node: ast.ClassDef, seen: frozenset[str]) -> bool | None:
        if any(name.startswith("test") for child in node.body for name in _binds(child)):
            return True
        for base in node.bases:
            if isinstance(base, ast.Attribute) and base.attr == "TestCase":
                continue
            if isinstance(base, ast.Name) and base.id == "TestCase":
                continue
            local = classes.get(base.id) if isinstance(base, ast.Name) else None
            if local is None or local.name in seen:
                return None  # a base from elsewhere may define tests
            found = has_tests(local, seen | {local.name})
            if found is not False:
                return found
        return False

    if has_tests(classes[class_name], frozenset({class_name})) is False:
        return f"the task's test class {class_name} defines no test method (test*)"
    return ""


def pytest_suite_problem(test_files: Mapping[str, str]) -> str:
    """Why a ``pytest`` task's ``test_files`` cannot run any test, or ``""``.

    A Python test file may hold tests when it binds a name starting with ``test`` or
    ``Test`` (pytest's default ``python_functions`` and ``python_classes``), defines any
    class (a ``unittest.TestCase`` subclass is collected whatever its name), or star
    imports. The suite is empty when none of its Python files may; a file that does not
    compile is the task's fault too.
    """
    python = {name: text for name, text in test_files.items() if name.endswith(".py")}
    if any(name.rsplit("/", 1)[-1] == "conftest.py" for name in python):
        return ""  # its hooks may collect tests from anything
    for name, text in python.items():
        tree = _parse(text, name)
        if isinstance(tree, str):
            return tree
        if _star_import(tree):
            return ""
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                return ""
            if any(n.startswith(("test", "Test")) for n in _binds(node)):
                return ""
    return "the task's test files define no test (no test* function, no test class)"
