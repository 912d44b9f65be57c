"""The guest wing (``src/execgym/guest``): what runs inside a sandbox, kept apart from the host.

Each bundle compiles and has no undefined or shadowed names (ruff on the bundle's text,
as the sandbox receives it); each guest file imports only the standard library (and
earlier parts of its bundles); no host module imports a guest module, except the
dual-use ones :data:`execgym.guest.DUAL_USE` declares with a reason; every guest
program is reachable through the one reader; no module of either side is over 600 lines.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from execgym import guest

SRC = Path(guest.__file__).resolve().parent.parent
GUEST = SRC / "guest"
GUEST_MODULES = sorted(p.stem for p in GUEST.glob("*.py") if p.name != "__init__.py")
RUFF = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")


def _programs() -> list[str]:
    """Every Python program the host sends: the bundles, and modules bundled with nothing."""
    bundled = {part for parts in guest.BUNDLES.values() for part in parts}
    alone = [name for name in GUEST_MODULES if name not in bundled]
    return sorted([*guest.BUNDLES, *alone])


def test_every_guest_module_is_a_program_or_a_part_of_one() -> None:
    bundled = {part for parts in guest.BUNDLES.values() for part in parts}
    for parts in guest.BUNDLES.values():
        assert set(parts) <= set(GUEST_MODULES), parts
    # Modules that are parts only must be reachable from a bundle; the rest run alone.
    assert bundled | set(_programs()) >= set(GUEST_MODULES)


@pytest.mark.parametrize("name", _programs())
def test_each_program_compiles(name: str) -> None:
    text = guest.bundle(name)
    compile(text, f"{name}.py", "exec", dont_inherit=True)
    assert not [line for line in text.splitlines() if line.startswith("from .")]


@pytest.mark.skipif(RUFF is None, reason="ruff (a dev dependency) is not installed")
@pytest.mark.parametrize("name", _programs())
def test_each_program_has_no_undefined_or_shadowed_names(name: str) -> None:
    assert RUFF is not None
    found = subprocess.run(
        [
            RUFF,
            "check",
            "--isolated",
            "--select",
            "F821,F811",
            "--output-format",
            "concise",
            "--stdin-filename",
            f"{name}_bundle.py",
            "-",
        ],
        input=guest.bundle(name),
        capture_output=True,
        text=True,
        check=False,
    )
    assert found.returncode == 0, found.stdout + found.stderr


@pytest.mark.parametrize("name", GUEST_MODULES)
def test_guest_modules_import_only_the_standard_library(name: str) -> None:
    tree = ast.parse((GUEST / f"{name}.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            modules = [node.module or ""]
        elif isinstance(node, ast.ImportFrom):
            # A sibling part: the bundle puts it first (guest.bundle checks the order).
            assert node.level == 1, ast.dump(node)
            assert node.module in GUEST_MODULES, ast.dump(node)
            assert name not in guest.DUAL_USE, f"dual-use {name} must stand alone"
            continue
        else:
            continue
        for module in modules:
            top = module.split(".")[0]
            # pytest_runner imports pytest inside the sandbox from the task's own site
            # (the pytest judge stages it); it is the one third-party import a guest makes.
            allowed = top in sys.stdlib_module_names or (
                name in _THIRD_PARTY and top in _THIRD_PARTY[name]
            )
            assert allowed, f"guest/{name}.py imports {module}, not in the standard library"


_THIRD_PARTY = {
    # Found inside the sandbox on the path the judge stages, never on the host's.
    "pytest_runner": {"pytest", "_pytest"},
    "pytest_proxy": {"pytest", "_pytest"},
    "coverage_reward": {"coverage"},
    "coverage_validation": {"coverage"},
}


def _host_modules() -> list[Path]:
    return [p for p in SRC.rglob("*.py") if GUEST not in p.parents and "data" not in p.parts]


def test_no_host_module_imports_a_guest_module() -> None:
    dual_use = {f"execgym.guest.{name}" for name in guest.DUAL_USE}
    offenders = []
    for path in _host_modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module == "execgym.guest":
                # the reader's names, or a module of the package
                modules = [
                    f"execgym.guest.{alias.name}"
                    for alias in node.names
                    if alias.name not in guest.__all__
                ]
            elif isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module]
            else:
                continue
            offenders += [
                f"{path.relative_to(SRC)}: {module}"
                for module in modules
                if module.startswith("execgym.guest.") and module not in dual_use
            ]
    assert offenders == []


def test_dual_use_modules_are_declared_with_a_reason() -> None:
    assert set(guest.DUAL_USE) <= set(GUEST_MODULES)
    assert all(len(reason) > 40 for reason in guest.DUAL_USE.values())


def test_a_part_that_needs_a_later_part_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(guest.BUNDLES, "backwards", ("solution_side", "boundary"))
    with pytest.raises(ValueError, match=r"solution_side\.py imports from \.boundary"):
        guest.bundle("backwards")
    guest.bundle.cache_clear()


def test_two_parts_defining_one_name_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # As the pytest harness was: boundary's OPERATIONS (a dict the solution's side
    # reads) replaced by the proxy's tuple of the same name, for the whole script.
    monkeypatch.setitem(guest.BUNDLES, "twice", ("plain_data", "boundary", "twice_b"))
    real = guest.source

    def fake_source(name: str) -> str:
        return "OPERATIONS = ()\n" if name == "twice_b" else real(name)

    monkeypatch.setattr(guest, "source", fake_source)
    with pytest.raises(ValueError, match=r"twice_b\.py and boundary\.py both define 'OPERATIONS'"):
        guest.bundle("twice")
    guest.bundle.cache_clear()


def test_an_unknown_program_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no guest program 'nope'"):
        guest.source("nope")


def test_only_the_last_part_keeps_its_main_call() -> None:
    text = guest.bundle("coverage_reward")
    top_calls = [
        node.value.func.id
        for node in ast.parse(text).body
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
    ]
    assert top_calls == ["coverage_main"]
    assert guest.bundle("assert_runner").rstrip().endswith("\nmain()")


def test_no_guest_module_is_over_600_lines() -> None:
    sizes = {
        path.name: len(path.read_text(encoding="utf-8").splitlines())
        for path in GUEST.iterdir()
        if path.is_file()  # not __pycache__, which a run that writes bytecode leaves
    }
    assert {name: n for name, n in sizes.items() if n > 600} == {}
