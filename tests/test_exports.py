from __future__ import annotations

import types

import execgym


def _isort_key(name: str) -> tuple[int, str]:
    # CONSTANTS, then Classes, then functions (ruff RUF022's isort-style order)
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


def test_all_is_sorted_and_complete() -> None:
    names = execgym.__all__
    assert names == sorted(names, key=_isort_key)
    for name in names:
        assert hasattr(execgym, name), name
    public = {n for n in vars(execgym) if not n.startswith("_") and n != "annotations"}
    modules = {n for n in public if isinstance(getattr(execgym, n), types.ModuleType)}
    assert public - modules - set(names) == set()
