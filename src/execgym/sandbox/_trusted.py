"""Programs execgym itself ships (the judges' harnesses), which a warm pool may load ahead.

A judge's harness is the same script for every rollout. The warm pool's zygote can load
its code once, before any run, instead of parsing and loading it in every run: a
harness run then skips about 3 ms of work, and (since the harness is execgym's own
code, not the rollout's) it runs as the first process of the run's PID namespace
rather than under a separate init. Only scripts registered here get this; any other
script runs as sent.
"""

from __future__ import annotations

import hashlib
import marshal
import sys
from dataclasses import dataclass
from types import CodeType


@dataclass(frozen=True)
class TrustedProgram:
    """A registered script, as a warm pool's zygote loads it.

    Attributes:
        key: Names it to the zygote.
        code: Marshalled code the zygote executes once, at load: the whole script, or
            with ``entry``, only its definitions (functions, classes, constants).
        entry: With definitions only, the function (no arguments) each run calls,
            which is what the script's last line does; ``None`` runs ``code`` per run.
    """

    key: str
    code: bytes
    entry: str | None = None


_REGISTRY: dict[bytes, TrustedProgram] = {}


def register_trusted_program(
    source: bytes, code: CodeType, *, definitions: CodeType | None = None, entry: str = "main"
) -> None:
    """Declare that the script ``source`` runs ``code`` and is execgym's own code.

    Args:
        source: The exact script bytes later passed to ``run_python``.
        code: The compiled code that ``source`` executes (a module's code object).
        definitions: The same module without its last statement, a call of ``entry``
            with no arguments; its body must do nothing but define names. A zygote
            then runs it once, ahead, and each run only calls ``entry``.
        entry: The function that last statement calls.

    Register only code execgym ships: a warm pool loads it into its zygote, outside any
    run's sandbox. The registry is per process and only grows; register each harness
    once (the judges build their scripts once per process).
    """
    blob = marshal.dumps(definitions if definitions is not None else code)
    key = hashlib.sha256(blob).hexdigest()[:24]
    _REGISTRY[source] = TrustedProgram(key, blob, entry if definitions is not None else None)


def trusted_program(source: bytes) -> TrustedProgram | None:
    """The registration of the script ``source``, or ``None`` if it is not registered."""
    return _REGISTRY.get(source)


def registered_programs() -> list[TrustedProgram]:
    """Every program registered so far, oldest first."""
    return list(_REGISTRY.values())


def marshal_tag() -> str:
    """What a loader must match for :attr:`TrustedProgram.code` to load (cache tag)."""
    return sys.implementation.cache_tag or ""
