"""Decide, from the Python harness's measurements, what leaks (see :mod:`execgym.guest.diagnose`).

The harness measures the solution's process after a warm-up (so first-call caches,
imports and lazily built state are not counted) and after each of two halves of ``K``
passes over the task's inputs. Something leaks when it grew in *both* halves, by at
least its threshold per call: a cache that fills during the warm-up, or a bounded one
(``lru_cache(maxsize)``, a pool), stops growing; a leak keeps growing with every call.
The thresholds are :class:`Thresholds`; their defaults were set on the planted corpus
(``tests/diagnostics/corpus``), where they give the precision and recall the docs state.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from typing import Any

from execgym.judges.diagnosis import Leak, Where

SOLUTION = "solution.py"


@dataclass(frozen=True, slots=True)
class Thresholds:
    """When growth counts as a leak.

    Attributes:
        min_bytes_per_call: Traced bytes per call of the entry point, per line.
        min_still_growing: The second half's growth over the first's, at least (a
            cache saturating during the measurement grows less and less).
        min_resident_bytes: Resident memory growth over both halves that no traced
            allocation explains (memory outside Python's allocator), at least.
    """

    min_bytes_per_call: float = 4.0
    min_still_growing: float = 0.25
    min_resident_bytes: int = 4 << 20


DEFAULT_THRESHOLDS = Thresholds()


@functools.lru_cache(maxsize=256)
def _functions(program: str) -> tuple[tuple[int, int, str], ...]:
    try:
        tree = ast.parse(program)
    except (SyntaxError, ValueError, RecursionError):
        return ()
    spans = [
        (node.lineno, node.end_lineno or node.lineno, node.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    return tuple(sorted(spans, key=lambda s: s[1] - s[0]))


@functools.lru_cache(maxsize=256)
def _class_line(program: str, name: str) -> int | None:
    try:
        tree = ast.parse(program)
    except (SyntaxError, ValueError, RecursionError):
        return None
    return next(
        (n.lineno for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name), None
    )


def enclosing(program: str, line: int) -> tuple[str, int] | None:
    """``(name, first line)`` of the innermost function around ``line``, else ``None``."""
    return next(((name, lo) for lo, hi, name in _functions(program) if lo <= line <= hi), None)


def where(program: str, line: int | None, code: str = "") -> Where:
    """The :class:`Where` of ``line`` of the program (its innermost function, its text)."""
    if line is None:
        return Where(SOLUTION, None)
    function = next((name for lo, hi, name in _functions(program) if lo <= line <= hi), "<module>")
    if not code:
        lines = program.splitlines()
        code = lines[line - 1].strip()[:120] if 0 < line <= len(lines) else ""
    return Where(SOLUTION, line, function, code)


def _grew(first: float, middle: float, last: float, limits: Thresholds) -> bool:
    d1, d2 = middle - first, last - middle
    return d1 > 0 and d2 > 0 and d2 >= limits.min_still_growing * d1


def find_leaks(
    program: str, phases: dict[str, Any], limits: Thresholds = DEFAULT_THRESHOLDS
) -> tuple[list[Leak], int]:
    """The leaks in the harness's ``phases``, and the calls they were measured over.

    Raises:
        KeyError, TypeError, ValueError: if ``phases`` lacks the leak phase's data (the
            caller treats that as a broken diagnostic).
    """
    traced = phases["leaks"]
    samples = traced["samples"]
    if len(samples) != 3:
        raise ValueError("the leak phase's samples are incomplete")
    first, middle, last = samples
    calls = max(1, int(last["calls"]) - int(first["calls"]))
    found: list[Leak] = []
    traced_total = 0.0
    traced_calls = max(1, int(traced.get("traced_calls") or 0))
    for row in traced["lines"]:
        b = [float(x) for x in row["bytes"]]
        growth = b[2] - b[0]
        traced_total += max(0.0, growth) * calls / traced_calls
        if _grew(b[0], b[1], b[2], limits) and growth / traced_calls >= limits.min_bytes_per_call:
            blocks = int(row["blocks"][2]) - int(row["blocks"][0])
            spot = where(program, int(row["line"]), str(row.get("code", "")))
            per_call = growth / traced_calls
            what = f"{per_call:.0f} B per call ({blocks} blocks over {traced_calls} calls)"
            found.append(Leak("memory", spot, what, per_call, growth, "bytes"))
    found += _handles(program, traced, first, middle, last, calls, limits)
    cycles = phases.get("cycles")
    if cycles:
        cycle_calls = max(1, int(cycles.get("calls", 0)))
        for row in cycles.get("rows", []):
            objects = int(row["objects"])
            if objects >= 2:
                spot = where(program, _class_line(program, str(row["class"])))
                what = f"{row['class']} objects with __del__ in reference cycles"
                found.append(Leak("cycle", spot, what, objects / cycle_calls, objects, "objects"))
    rss = _counts(first, middle, last, "rss")
    if rss is not None:
        growth = rss[2] - rss[0]
        if (
            _grew(rss[0], rss[1], rss[2], limits)
            and growth >= limits.min_resident_bytes
            and traced_total < growth / 2
        ):
            what = (
                f"resident memory grew {growth / 2**20:.1f} MiB; no traced allocation explains it"
            )
            found.append(
                Leak("resident", where(program, None), what, growth / calls, growth, "bytes")
            )
    return found, calls


def _counts(
    first: dict[str, Any], middle: dict[str, Any], last: dict[str, Any], key: str
) -> tuple[int, int, int] | None:
    """``key``'s three counts, or ``None`` if one is missing (the harness could not read it)."""
    values = (first.get(key), middle.get(key), last.get(key))
    if not all(isinstance(v, int) for v in values):
        return None
    return int(values[0]), int(values[1]), int(values[2])  # type: ignore[arg-type]


def _handles(
    program: str,
    traced: dict[str, Any],
    first: dict[str, Any],
    middle: dict[str, Any],
    last: dict[str, Any],
    calls: int,
    limits: Thresholds,
) -> list[Leak]:
    found: list[Leak] = []
    opened = traced.get("opened", {})
    for kind, unit in (("fds", "descriptors"), ("threads", "threads"), ("processes", "processes")):
        values = _counts(first, middle, last, kind)
        if values is None or not _grew(values[0], values[1], values[2], limits):
            continue
        growth = values[2] - values[0]
        if kind == "fds":
            by_line: dict[tuple[int | None, str], int] = {}
            for what_kind, _target, line in traced.get("handles", {}).values():
                key = (line, what_kind)
                by_line[key] = by_line.get(key, 0) + 1
            if not by_line:
                by_line[(None, "descriptor")] = growth
            for (line, what_kind), count in by_line.items():
                spot = where(program, line)
                what = f"{what_kind} descriptors left open"
                found.append(Leak("descriptor", spot, what, count / calls, count, unit))
        elif kind == "threads":
            lines = [t for t in traced.get("threads", []) if isinstance(t, int)]
            line = max(set(lines), key=lines.count) if lines else None
            if line is None and opened.get("thread"):
                line = opened["thread"][1]
            found.append(
                Leak(
                    "thread",
                    where(program, line),
                    "threads still running",
                    growth / calls,
                    growth,
                    unit,
                )
            )
        else:
            line = opened["process"][1] if opened.get("process") else None
            what = "child processes never waited for (running or zombie)"
            found.append(Leak("process", where(program, line), what, growth / calls, growth, unit))
    return found
