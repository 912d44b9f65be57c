"""The programs that run INSIDE a sandbox, and the host's one way to read them.

Every other file in this package runs inside a sandbox (a judge's harness, the warm
pool's zygote, a session's agent, a server step), under the sandbox's interpreter with
the standard library only (``python -I -S``: no site-packages, no execgym). The host
never imports them (:data:`DUAL_USE` names the two exceptions and why); it reads their
text here and sends it into the sandbox:

- :func:`source` is one file's text, as it is on disk.
- :func:`bundle` is a program made of several files (:data:`BUNDLES`, the one table of
  what is bundled with what). Each part is a complete module that says what it takes
  from the parts before it with a relative import (``from .plain_data import
  make_codec``), so ruff and a reader see where every name comes from. The bundle is
  the parts' text one after the other, with those relative imports left out (the names
  are already defined above them), a standard-library import an earlier part already
  made left out too, and the ``main()`` call that ends a part left out unless the part
  is the bundle's last: the sandbox receives one script with no imports of execgym,
  as before.

This module itself is host code (standard library only too, so it costs nothing to
import).

>>> "def main" in bundle("assert_runner")
True
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from execgym.program_cache import cached_bytes

__all__ = ["BUNDLES", "DUAL_USE", "bundle", "source"]

BOUNDARY = ("plain_data", "boundary", "solution_side", "untrusted")
"""The process boundary every Python harness of the judges starts with: plain data, what
else crosses, the solution's process, and the harness's handle on it."""

BUNDLES: dict[str, tuple[str, ...]] = {
    "assert_runner": (*BOUNDARY, "assert_runner"),
    "call_runner": (*BOUNDARY, "call_runner"),
    "pytest_runner": (*BOUNDARY, "pytest_proxy", "pytest_runner"),
    # The coverage reward builds on the assert harness (whose main() it leaves out).
    "coverage_reward": (*BOUNDARY, "assert_runner", "coverage_reward"),
    # The diagnostics harness (leaks, hot spots, complexity): shared helpers, the leak
    # phase, the solution's process, then the harness that reads it from outside.
    "diagnose": ("diagnose_common", "diagnose_leaks", "diagnose_solution", "diagnose"),
    # The warm pool's zygote counts a run's process tree as the host does.
    "zygote": ("proctree", "zygote_world", "zygote_run", "zygote"),
}
"""Bundle name -> its parts (file stems in this package), in the order they run.

A name not in the table is a one-part bundle: the file ``<name>.py`` alone.
"""

DUAL_USE: dict[str, str] = {
    "proctree": (
        "the host measures a run's process tree (sandbox/_process.py) with the same code "
        "the warm pool's zygote runs inside its sandbox, so both tiers count alike"
    ),
    "plain_data": (
        "the host writes the function-call harness's job (judges/function_call.py) in the "
        "plain-data encoding the harness reads; one codec keeps the two sides in step"
    ),
}
"""Guest modules the host may import too, with the reason (standard library only still)."""


def _file_name(name: str) -> str:
    return name if "." in name else f"{name}.py"


def source(name: str) -> str:
    """The text of the guest file ``name``.

    Args:
        name: A module's stem (``"trampoline"``) or a file name (``"call_runner.js"``).

    Raises:
        ValueError: if this package has no such file.
    """
    here = Path(__file__).parent / _file_name(name)
    if here.is_file():  # an ordinary install: read without importlib.resources (and
        return here.read_text(encoding="utf-8")  # its tempfile, random, zipfile...)
    from importlib import resources  # a package in a zip file, or another loader's

    path = resources.files(__name__).joinpath(_file_name(name))
    if not path.is_file():
        raise ValueError(f"no guest program {name!r} in execgym/guest")
    return path.read_text(encoding="utf-8")


@functools.cache
def bundle(name: str) -> str:
    """The program ``name`` as the sandbox runs it: its parts (:data:`BUNDLES`) joined.

    Args:
        name: A key of :data:`BUNDLES`, or the stem of a one-part Python program.

    Returns:
        One script, standard library only, that imports nothing from execgym.

    Raises:
        ValueError: if a part is missing, or imports from a part that is not before it
            in the bundle (its names would be undefined), or defines a top-level name
            another part defines too (one would silently replace the other), or has a
            ``__future__`` import anywhere but first.
    """
    parts = BUNDLES.get(name, (name,))
    texts = [source(part) for part in parts]
    # Kept on disk (execgym.program_cache): parsing every part was a tenth of a second
    # of each command's start. The key is every part and this module's own code.
    inputs = [Path(__file__).read_bytes()]
    inputs += [f"{part}\0{text}".encode() for part, text in zip(parts, texts, strict=True)]
    made = cached_bytes(f"bundle-{name}", inputs, lambda: _join(name, parts, texts).encode())
    return made.decode("utf-8")


def _join(name: str, parts: tuple[str, ...], sources: list[str]) -> str:
    """The bundle ``name``: ``sources`` (the text of each of ``parts``) as one script."""
    imported: set[tuple[str | None, str, str | None]] = set()
    owners: dict[str, str] = {}
    texts = []
    for index, (part, text) in enumerate(zip(parts, sources, strict=True)):
        for bound in _top_level_names(text):
            if owners.setdefault(bound, part) != part:
                raise ValueError(
                    f"guest bundle {name!r}: {part}.py and {owners[bound]}.py both define "
                    f"{bound!r}, and in one script the later replaces the earlier for both; "
                    "rename one"
                )
        texts.append(_as_part(part, text, name, parts[:index], imported, index == len(parts) - 1))
    return "\n\n".join(texts)


def _top_level_names(text: str) -> set[str]:
    """The names a module's own top-level statements bind (imports aside)."""
    names: set[str] = set()
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign | ast.For):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def _as_part(
    part: str,
    text: str,
    bundle_name: str,
    before: tuple[str, ...],
    imported: set[tuple[str | None, str, str | None]],
    last: bool,
) -> str:
    """``text`` as a bundle's part: some lines left out.

    Those are its imports from earlier parts, the standard-library imports an earlier
    part made (``imported``, which this adds to), and ``main()`` unless ``last``.
    """
    tree = ast.parse(text, f"{part}.py")
    dropped: list[tuple[int, int]] = []
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom) and not (
            isinstance(node, ast.ImportFrom) and node.level
        ):
            module = node.module if isinstance(node, ast.ImportFrom) else None
            names = {(module, alias.name, alias.asname) for alias in node.names}
            if names <= imported:
                dropped.append((node.lineno, node.end_lineno or node.lineno))
            imported |= names
        if isinstance(node, ast.ImportFrom) and node.level:
            if node.level != 1 or node.module not in before:
                raise ValueError(
                    f"guest bundle {bundle_name!r}: {part}.py imports from "
                    f"{'.' * node.level}{node.module}, which is not a part before it "
                    f"({', '.join(before) or 'none'}); add it to BUNDLES in execgym/guest"
                )
            dropped.append((node.lineno, node.end_lineno or node.lineno))
        elif isinstance(node, ast.ImportFrom) and node.module == "__future__" and before:
            raise ValueError(
                f"guest bundle {bundle_name!r}: {part}.py has a __future__ import but is "
                "not the bundle's first part"
            )
    final = tree.body[-1] if tree.body else None
    if not last and final is not None and _is_main_call(final):
        dropped.append((final.lineno, final.end_lineno or final.lineno))
    if not dropped:
        return text
    lines = text.splitlines(keepends=True)
    for first, end in sorted(dropped, reverse=True):
        del lines[first - 1 : end]
    return "".join(lines)


def _is_main_call(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == "main"
        and not node.value.args
        and not node.value.keywords
    )
