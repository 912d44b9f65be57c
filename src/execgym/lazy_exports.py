"""Packages whose exports are imported on first use (PEP 562), so importing them is cheap.

Importing any module of a package runs the package's ``__init__`` first. When that
``__init__`` imports everything the package exports, ``from execgym.judges.base import
Verdict`` loads every judge, and a command that needs one module pays for all of them
(``execgym score`` once spent a third of its start-up importing diagnostics, episodes and
judges no task of the batch used). A package made lazy here names each export and the
module it lives in; the module is imported when the name is first looked up
(``package.Name`` or ``from package import Name``), and kept.

Use it at the end of a package's ``__init__``, with the same names imported under
``typing.TYPE_CHECKING`` for type checkers and readers::

    if TYPE_CHECKING:
        from execgym.judges.stdio import StdioJudge
    lazy_package(__name__, {"StdioJudge": "execgym.judges.stdio"})

An export named like one of the package's submodules (``execgym.reward.evaluate``, the
function, lives in the module ``execgym/reward/evaluate.py``) stays the export: the
import system's binding of the submodule to the package attribute of that name is not
made (``sys.modules`` still holds the submodule), which is what the package's eager
imports left behind before.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Mapping

__all__ = ["LazyPackage", "lazy_package"]


class LazyPackage(types.ModuleType):
    """A package module whose exports (``_lazy_exports``: name -> module) load on use."""

    _lazy_exports: Mapping[str, str]

    def __getattr__(self, name: str) -> object:
        """Import the module that holds export ``name``, keep the value, return it.

        Raises:
            AttributeError: if ``name`` is not an export (nor anything else of the
                package's), as for any module.
        """
        exports: Mapping[str, str] = self.__dict__.get("_lazy_exports", {})
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        self.__dict__[name] = value
        return value

    def __setattr__(self, name: str, value: object) -> None:
        """Set an attribute, except the import system's binding of a same-named submodule."""
        if (
            isinstance(value, types.ModuleType)
            and name in self.__dict__.get("_lazy_exports", {})
            and value.__name__ == f"{self.__name__}.{name}"
        ):
            return  # the export keeps the name; the submodule stays in sys.modules
        super().__setattr__(name, value)

    def __dir__(self) -> list[str]:
        """The package's attributes, exports not yet imported included."""
        return sorted({*self.__dict__, *self.__dict__.get("_lazy_exports", {})})


def lazy_package(name: str, exports: Mapping[str, str]) -> None:
    """Make the package ``name`` (already in ``sys.modules``) load ``exports`` on use.

    Args:
        name: The package's ``__name__``, called from its ``__init__``.
        exports: ``{export name: module that defines it}``; each module must define
            the name (a test of each package checks it does).
    """
    module = sys.modules[name]
    module.__class__ = LazyPackage
    module.__dict__["_lazy_exports"] = dict(exports)
