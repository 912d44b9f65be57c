"""Mutants of a reference solution, made from its AST (parsed, never run, on the host).

Operators (each a small, plausible bug):

========================  ==============================================================
``arithmetic``            ``+``↔``-``, ``*``↔``/``, ``//``→``/``, ``%``→``//``, ``**``→``*``,
                          ``&``↔``|``, ``<<``↔``>>`` (also in augmented assignments)
``comparison``            flips (``<``→``>=``, ``==``→``!=``, ``in``→``not in``, ``is``→``is not``)
``boundary``              ``<``↔``<=``, ``>``↔``>=``
``boolean``               ``and``↔``or``; ``not x``→``x``
``constant``              integers ±1, ``True``↔``False``, a string emptied (or filled)
``statement``             one statement replaced by ``pass`` (not at module level)
``return``                ``return x``→``return None``
``builtin``               ``min``↔``max``, ``any``↔``all``; ``break``↔``continue``
========================  ==============================================================

Only code in the reference's own lines is mutated (not the prompt's helpers or
docstring). Cheap equivalent-mutant handling, before anything runs: a mutant whose
normalized AST (``ast.dump`` of the re-parsed source, without no-op ``pass``
statements, so formatting, comments and where a dropped statement was do not count)
equals the original's or an earlier mutant's is dropped, and so is one that does not
compile. The rest is done after judging, in :mod:`execgym.validation.mutation`.
"""

from __future__ import annotations

import ast
import copy
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

_ARITHMETIC: dict[type[ast.operator], list[type[ast.operator]]] = {
    ast.Add: [ast.Sub],
    ast.Sub: [ast.Add],
    ast.Mult: [ast.Div],
    ast.Div: [ast.Mult],
    ast.FloorDiv: [ast.Div],
    ast.Mod: [ast.FloorDiv],
    ast.Pow: [ast.Mult],
    ast.BitAnd: [ast.BitOr],
    ast.BitOr: [ast.BitAnd],
    ast.LShift: [ast.RShift],
    ast.RShift: [ast.LShift],
}
_FLIP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.GtE,
    ast.LtE: ast.Gt,
    ast.Gt: ast.LtE,
    ast.GtE: ast.Lt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
_BOUNDARY: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
}
_BUILTINS = {"min": "max", "max": "min", "any": "all", "all": "any"}


@dataclass(frozen=True, slots=True)
class Mutant:
    """One mutant program.

    Attributes:
        mutant_id: ``"m<n>"``, stable for a given reference and operator set.
        operator: The operator family (``"comparison"``, ``"constant"``...).
        line: 1-based line of the program the change is on.
        description: What changed, e.g. ``"< -> <="``.
        source: The whole mutated program (prompt and reference), as source text.
    """

    mutant_id: str
    operator: str
    line: int
    description: str
    source: str


# A mutation point: (operator family, line, description, apply); apply changes the tree
# in place and returns the function that undoes it.
_Point = tuple[str, int, str, Callable[[], Callable[[], None]]]


def _set(node: ast.AST, attr: str, value: object) -> Callable[[], Callable[[], None]]:
    def apply() -> Callable[[], None]:
        old = getattr(node, attr)
        setattr(node, attr, value)
        return lambda: setattr(node, attr, old)

    return apply


_Node = TypeVar("_Node", bound=ast.AST)


def _set_item(items: list[_Node], index: int, value: _Node) -> Callable[[], Callable[[], None]]:
    def apply() -> Callable[[], None]:
        old = items[index]
        items[index] = value

        def undo() -> None:
            items[index] = old

        return undo

    return apply


def _op_name(op: ast.AST) -> str:
    return type(op).__name__


def _expression_points(node: ast.AST) -> Iterator[_Point]:
    line = getattr(node, "lineno", 0)
    if isinstance(node, ast.BinOp | ast.AugAssign):
        for new in _ARITHMETIC.get(type(node.op), []):
            yield (
                "arithmetic",
                line,
                f"{_op_name(node.op)} -> {new.__name__}",
                _set(node, "op", new()),
            )
    elif isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            if type(op) in _FLIP:
                flipped = _FLIP[type(op)]()
                yield (
                    "comparison",
                    line,
                    f"{_op_name(op)} -> {_op_name(flipped)}",
                    _set_item(node.ops, i, flipped),
                )
            if type(op) in _BOUNDARY:
                bound = _BOUNDARY[type(op)]()
                yield (
                    "boundary",
                    line,
                    f"{_op_name(op)} -> {_op_name(bound)}",
                    _set_item(node.ops, i, bound),
                )
    elif isinstance(node, ast.BoolOp):
        new_op: ast.boolop = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        yield (
            "boolean",
            line,
            f"{_op_name(node.op)} -> {_op_name(new_op)}",
            _set(node, "op", new_op),
        )
    elif isinstance(node, ast.Constant):
        yield from _constant_points(node, line)
    elif isinstance(node, ast.Name) and node.id in _BUILTINS:
        yield (
            "builtin",
            line,
            f"{node.id} -> {_BUILTINS[node.id]}",
            _set(node, "id", _BUILTINS[node.id]),
        )


def _constant_points(node: ast.Constant, line: int) -> Iterator[_Point]:
    value = node.value
    if isinstance(value, bool):
        yield "constant", line, f"{value} -> {not value}", _set(node, "value", not value)
    elif isinstance(value, int):
        yield "constant", line, f"{value} -> {value + 1}", _set(node, "value", value + 1)
        yield "constant", line, f"{value} -> {value - 1}", _set(node, "value", value - 1)
    elif isinstance(value, str):
        new = "" if value else "execgym"
        yield "constant", line, f"{value[:20]!r} -> {new!r}", _set(node, "value", new)


def _statement_points(node: ast.AST) -> Iterator[_Point]:
    if isinstance(node, ast.Module):
        return  # dropping a whole definition or import only makes a NameError
    for field in ("body", "orelse", "finalbody"):
        body = getattr(node, field, None)
        if not isinstance(body, list):
            continue
        for i, statement in enumerate(body):
            if not isinstance(statement, ast.stmt) or _is_docstring(statement):
                continue
            line = statement.lineno
            if not isinstance(statement, ast.Pass):
                yield (
                    "statement",
                    line,
                    f"drop {type(statement).__name__}",
                    _set_item(body, i, ast.Pass()),
                )
            if isinstance(statement, ast.Return) and not _is_none(statement.value):
                yield (
                    "return",
                    line,
                    "return -> return None",
                    _set(statement, "value", ast.Constant(None)),
                )
            if isinstance(statement, ast.Break | ast.Continue):
                other: ast.stmt = (
                    ast.Continue() if isinstance(statement, ast.Break) else ast.Break()
                )
                yield (
                    "builtin",
                    line,
                    f"{type(statement).__name__} -> {type(other).__name__}",
                    _set_item(body, i, other),
                )


def _unary_points(node: ast.AST) -> Iterator[_Point]:
    for field, value in ast.iter_fields(node):
        if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Not):
            yield "boolean", value.lineno, "not x -> x", _set(node, field, value.operand)


def _is_docstring(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


def _is_none(value: ast.expr | None) -> bool:
    return value is None or (isinstance(value, ast.Constant) and value.value is None)


def _points(tree: ast.Module, in_scope: Callable[[int], bool]) -> list[_Point]:
    docstrings = {
        id(s.value) for s in ast.walk(tree) if isinstance(s, ast.Expr) and _is_docstring(s)
    }
    points: list[_Point] = []
    for node in ast.walk(tree):
        if id(node) in docstrings or isinstance(node, ast.JoinedStr):
            continue
        found = [*_expression_points(node), *_statement_points(node), *_unary_points(node)]
        points += [p for p in found if in_scope(p[1])]
    return points


def _round_robin(points: list[_Point], cap: int) -> list[_Point]:
    by_family: dict[str, list[_Point]] = {}
    for point in points:
        by_family.setdefault(point[0], []).append(point)
    chosen: list[_Point] = []
    for group in itertools.zip_longest(*by_family.values()):
        chosen += [p for p in group if p is not None]
    return chosen[:cap]


def _normalized(tree: ast.AST) -> str:
    """``ast.dump`` of ``tree`` with no-op ``pass`` statements removed (``tree`` changes)."""
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list) and len(body) > 1:
                kept = [s for s in body if not isinstance(s, ast.Pass)]
                body[:] = kept or body[:1]
    return ast.dump(tree)


def make_mutants(
    source: str, in_scope: Callable[[int], bool], cap: int
) -> tuple[list[Mutant], int]:
    """Mutants of ``source`` changing only lines where ``in_scope(line)`` holds.

    Args:
        source: The program (it must parse).
        in_scope: Which 1-based lines may be mutated.
        cap: At most this many mutants are returned, chosen round-robin over operator
            families so that one family cannot crowd out the others.

    Returns:
        The mutants, and how many candidates were dropped as equivalent by AST (equal
        to the original or to an earlier mutant) or as not compiling.
    """
    tree = ast.parse(source)
    seen = {_normalized(copy.deepcopy(tree))}
    work = copy.deepcopy(tree)
    mutants: list[Mutant] = []
    dropped = 0
    for family, line, description, apply in _round_robin(_points(work, in_scope), cap * 2):
        undo = apply()
        try:
            text = ast.unparse(work) + "\n"
        finally:
            undo()
        try:
            normal = _normalized(ast.parse(text))
            compile(text, "mutant", "exec", dont_inherit=True)  # compiled, never run here
        except (SyntaxError, ValueError):
            dropped += 1
            continue
        if normal in seen:
            dropped += 1
            continue
        seen.add(normal)
        if len(mutants) < cap:
            mutants.append(Mutant(f"m{len(mutants)}", family, line, description, text))
    return mutants, dropped
