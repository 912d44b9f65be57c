"""The scripts the sandbox runs for each harness, built once per process.

Every Python harness is standard library only and ships as one script, a bundle of
guest modules (:func:`execgym.guest.bundle`: the process-boundary code, then the
harness), compiled here and sent marshalled (:func:`marshalled_program`).
"""

from __future__ import annotations

import functools
import marshal
import sys
from types import CodeType

from execgym import guest
from execgym.program_cache import compile_cached
from execgym.sandbox import register_trusted_program


def marshalled_program(source: bytes, filename: str = "runner.py") -> bytes:
    """A script that runs ``source``, compiled here once, as marshalled code.

    Compiling the harness's source costs about 10 ms per run on a loaded machine, more
    than the rest of the harness; a marshalled code object loads in well under 1 ms.
    The compiled code is kept on disk between processes (:mod:`execgym.program_cache`).
    The sandbox runs the interpreter that runs execgym, so the format matches; should it
    not, the script stops before the harness starts, which the judge reports as a
    ``sandbox_error`` with the reason.
    """
    return _script_for(compile_cached(source, filename))


def _script_for(code: CodeType) -> bytes:
    tag = repr(sys.implementation.cache_tag or "").encode()
    return (
        b"import marshal, sys\n"
        b"if sys.implementation.cache_tag != " + tag + b":\n"
        b"    sys.exit('execgym: the sandbox runs another interpreter (%s) than execgym ("
        + tag.strip(b"'")
        + b"); run the sandbox with execgym\\'s own interpreter' % sys.implementation.cache_tag)\n"
        b"exec(marshal.loads(" + repr(marshal.dumps(code)).encode() + b"))\n"
    )


@functools.cache
def harness_program(name: str) -> bytes:
    """The guest bundle ``name`` (``"assert_runner"``...), marshalled.

    The script is
    registered as execgym's own (:func:`execgym.sandbox._trusted.register_trusted_program`),
    so a warm pool defines its functions once, ahead of the runs, and each run only
    calls its ``main()``.
    """
    source = guest.bundle(name).encode()
    name = f"{name}.py"
    body = source.rstrip()
    if not body.endswith(b"\nmain()"):  # every harness ends by calling main()
        code = compile_cached(source, name)
        script = _script_for(code)
        register_trusted_program(script, code)
        return script
    # Compiled once (the harness source is large: compiling it twice was most of the
    # command line's start-up): the definitions, which the script runs, then main().
    # (kept on disk between processes too: execgym.program_cache)
    definitions = compile_cached(body[: -len(b"main()")], name)
    script = _script_for(definitions) + b"main()\n"
    register_trusted_program(script, definitions, definitions=definitions, entry="main")
    return script
