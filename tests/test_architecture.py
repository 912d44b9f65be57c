"""Package boundaries: no module imports another package's private module, no cycles.

Read from the source with :mod:`ast` (nothing is imported), every import counts: at
module level, inside functions (lazy imports) and under ``TYPE_CHECKING``, since each is
a dependency a reader has to follow.

- A private module is one whose name, or a package's on its path, starts with ``_``
  (``execgym.sandbox._run``, ``execgym.tasks.datasets._files``). It belongs to the
  package that holds it and to that package's subpackages; anything else imports what
  the package makes public (its ``__init__`` or a public module).
- The units of the dependency graph are the packages directly under ``execgym`` and the
  modules at its top level (``execgym.errors``, ``execgym.cli``...). ``execgym``'s own
  ``__init__`` (the facade that re-exports the public API) is left out. A cycle is a
  strongly connected set of two or more units.

An exception is listed below with the reason it is one; the tests also fail when an
exception no longer occurs, so the lists only shrink.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import execgym

ROOT = Path(execgym.__file__).resolve().parent
NOT_CODE = ("data",)
"""Folders of files shipped as data (the episodes' example repositories), not execgym's
modules."""

PRIVATE_IMPORT_EXCEPTIONS: dict[tuple[str, str], str] = {}
"""``(importer, private module) -> why`` for a private import across packages."""

CYCLE_EXCEPTIONS: dict[frozenset[str], str] = {}
"""``units -> why`` for a cycle between packages."""


def _modules() -> dict[str, Path]:
    modules = {}
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT)
        if relative.parts[0] in NOT_CODE:
            continue
        parts = ["execgym", *relative.with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()


def _imports(name: str, path: Path) -> Iterator[tuple[int, str]]:
    """``(line, module)`` for every execgym module ``name`` imports (names resolved)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                yield node.lineno, submodule if submodule in MODULES else source


def _owner_of_private(module: str) -> str | None:
    """The package a private ``module`` belongs to, or ``None`` if it is public."""
    parts = module.split(".")
    for index, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:index])
    return None


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _private_imports() -> dict[tuple[str, str], list[str]]:
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    for name, path in MODULES.items():
        for line, target in _imports(name, path):
            if not target.startswith("execgym"):
                continue
            owner = _owner_of_private(target)
            if owner is None or name == owner or name.startswith(owner + "."):
                continue
            found[(name, target)].append(f"{path.relative_to(ROOT.parent)}:{line}")
    return found


def _package_graph() -> dict[str, dict[str, list[str]]]:
    graph: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for name, path in MODULES.items():
        if name == "execgym":
            continue
        for line, target in _imports(name, path):
            if not target.startswith("execgym."):
                continue
            source_unit, target_unit = _unit(name), _unit(target)
            if source_unit != target_unit:
                graph[source_unit][target_unit].append(f"{name}:{line}")
    return graph


def _cycles(graph: dict[str, dict[str, list[str]]]) -> list[frozenset[str]]:
    """The strongly connected sets of two or more units (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(unit: str) -> None:
        index[unit] = low[unit] = len(index)
        stack.append(unit)
        on_stack.add(unit)
        for other in graph.get(unit, {}):
            if other not in index:
                visit(other)
                low[unit] = min(low[unit], low[other])
            elif other in on_stack:
                low[unit] = min(low[unit], index[other])
        if low[unit] == index[unit]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == unit:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for unit in sorted(graph):
        if unit not in index:
            visit(unit)
    return found


def test_the_walk_sees_the_whole_package() -> None:
    assert "execgym.sandbox._run" in MODULES
    assert "execgym.judges.base" in MODULES
    assert not [m for m in MODULES if ".data." in m]
    graph = _package_graph()
    assert "sandbox" in graph["judges"], "judges import the sandbox: the walk must see it"


def test_no_module_imports_another_packages_private_module() -> None:
    found = _private_imports()
    leaks = [
        f"{importer} imports {target} ({', '.join(where)})"
        for (importer, target), where in sorted(found.items())
        if (importer, target) not in PRIVATE_IMPORT_EXCEPTIONS
    ]
    assert not leaks, (
        "private modules imported from outside their package; export what is shared "
        "from the package (its __init__ or a public module) instead:\n" + "\n".join(leaks)
    )
    stale = sorted(set(PRIVATE_IMPORT_EXCEPTIONS) - set(found))
    assert not stale, f"exceptions that no longer occur, remove them: {stale}"


def test_no_import_cycle_between_packages() -> None:
    graph = _package_graph()
    cycles = _cycles(graph)
    report = []
    for cycle in cycles:
        if cycle in CYCLE_EXCEPTIONS:
            continue
        edges = [
            f"  {a} -> {b}: {', '.join(sorted(set(graph[a][b]))[:3])}"
            for a in sorted(cycle)
            for b in sorted(cycle)
            if b in graph[a]
        ]
        report.append(" <-> ".join(sorted(cycle)) + "\n" + "\n".join(edges))
    assert not report, (
        "import cycles between packages; move what both need to the lower one or to a "
        "neutral module:\n" + "\n".join(report)
    )
    stale = [sorted(c) for c in CYCLE_EXCEPTIONS if c not in cycles]
    assert not stale, f"cycle exceptions that no longer occur, remove them: {stale}"


def test_the_guard_finds_a_leak_and_a_cycle() -> None:
    """The checks themselves, on a made-up graph and names."""
    assert _owner_of_private("execgym.sandbox._run") == "execgym.sandbox"
    assert _owner_of_private("execgym.tasks.datasets._files") == "execgym.tasks.datasets"
    assert _owner_of_private("execgym.sandbox.base") is None
    graph = {"a": {"b": ["x"]}, "b": {"c": ["y"]}, "c": {"a": ["z"]}, "d": {"a": ["w"]}}
    assert _cycles(graph) == [frozenset({"a", "b", "c"})]
