"""Split ``check(candidate)`` into cases, for partial credit (tests are operator data).

HumanEval-style tests are one function whose first failing ``assert`` ends it, so a
solution right on nine inputs of ten scores like one right on none. For a fraction of
tests passed, each top-level statement of ``check``'s body that contains an ``assert``
becomes one case::

    def check(candidate):            def check(candidate):
        x = 3                            x = 3
        assert candidate(x) == 4   ->    def __execgym_case_1():
        for y in ys:                         assert candidate(x) == 4
            assert candidate(y)          __execgym_case__(__execgym_case_1)
                                         ...

The harness's ``__execgym_case__`` runs each one, counts it, and goes on after a
failure. Statements without an ``assert`` (set-up) stay as they are. A case that binds
a name a later statement reads would break that statement: such tests, and tests
without a ``check`` function, are left whole (one case).
"""

from __future__ import annotations

import ast
import sys
from typing import Any

CASE_RUNNER = "__execgym_case__"
# Any: the keyword exists only from 3.12 on, which the 3.11 signature cannot say.
_NO_TYPE_PARAMS: dict[str, Any] = {"type_params": []} if sys.version_info >= (3, 12) else {}


def _binds(node: ast.AST) -> set[str]:
    return {
        n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }


def _reads(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _split_body(body: list[ast.stmt]) -> list[ast.stmt] | None:
    out: list[ast.stmt] = []
    for number, statement in enumerate(body, start=1):
        if not any(isinstance(n, ast.Assert) for n in ast.walk(statement)):
            out.append(statement)
            continue
        others = [s for s in body if s is not statement]
        needed = set().union(set(), *(_reads(s) for s in body[number:]), *map(_binds, others))
        if _binds(statement) & needed:
            return None  # a case would hide a name the rest of check needs
        name = f"__execgym_case_{number}"
        out.append(
            ast.FunctionDef(
                name=name,
                args=ast.arguments(
                    posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]
                ),
                body=[statement],
                decorator_list=[],
                returns=None,
                **_NO_TYPE_PARAMS,
            )
        )
        call = ast.Call(ast.Name(CASE_RUNNER, ast.Load()), [ast.Name(name, ast.Load())], [])
        out.append(ast.Expr(call))
    return out


def split_cases(tests: str) -> str:
    """``tests`` with each asserting top-level statement of ``check`` made a case.

    Returns:
        The rewritten source; ``tests`` unchanged when it does not parse, has no
        ``check`` function, or could not be split safely (then it is one case).
    """
    try:
        tree = ast.parse(tests)
    except (SyntaxError, ValueError):
        return tests
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            body = _split_body(node.body)
            if body is None:
                return tests
            node.body = body
            return ast.unparse(ast.fix_missing_locations(tree))
    return tests
