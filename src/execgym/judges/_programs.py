"""The scripts the sandbox runs for each harness, built once per process.

Every Python harness is standard library only and ships as one script: the shared
process-boundary modules (:mod:`execgym.judges._plain_data`,
:mod:`execgym.judges._untrusted`) followed by the harness's own source, compiled here
and sent marshalled (:func:`marshalled_program`).
"""

from __future__ import annotations

import functools
import marshal
import sys
from importlib import resources
from types import CodeType

from execgym.sandbox import register_trusted_program


def runner_source(name: str) -> bytes:
    """The source of the judges' data file ``name`` (for example ``_call_runner.py``)."""
    return resources.files("execgym.judges").joinpath(name).read_bytes()


def with_plain_data(source: bytes, *parts: str) -> bytes:
    """``source`` preceded by the process-boundary code, whose names it may use.

    That is :mod:`execgym.judges._plain_data`, :mod:`execgym.judges._untrusted`, and
    then the judges' data files named in ``parts``, in that order.
    """
    names = ("_plain_data.py", "_untrusted.py", *parts)
    return b"\n\n".join([*(runner_source(name) for name in names), source])


def marshalled_program(source: bytes, filename: str = "runner.py") -> bytes:
    """A script that runs ``source``, compiled here once, as marshalled code.

    Compiling the harness's source costs about 10 ms per run on a loaded machine, more
    than the rest of the harness; a marshalled code object loads in well under 1 ms.
    The sandbox runs the interpreter that runs execgym, so the format matches; should it
    not, the script stops before the harness starts, which the judge reports as a
    ``sandbox_error`` with the reason.
    """
    return _script_for(compile(source, filename, "exec", dont_inherit=True, optimize=0))


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
def harness_program(name: str, *parts: str) -> bytes:
    """The harness ``name`` (``_assert_runner.py``...) with the boundary code, marshalled.

    ``parts`` are more of the judges' data files to put before it. The script is
    registered as execgym's own (:func:`execgym.sandbox._trusted.register_trusted_program`),
    so a warm pool defines its functions once, ahead of the runs, and each run only
    calls its ``main()``.
    """
    source = with_plain_data(runner_source(name), *parts)
    body = source.rstrip()
    if not body.endswith(b"\nmain()"):  # every harness ends by calling main()
        code = compile(source, name, "exec", dont_inherit=True, optimize=0)
        script = _script_for(code)
        register_trusted_program(script, code)
        return script
    # Compiled once (the harness source is large: compiling it twice was most of the
    # command line's start-up): the definitions, which the script runs, then main().
    definitions = compile(body[: -len(b"main()")], name, "exec", dont_inherit=True, optimize=0)
    script = _script_for(definitions) + b"main()\n"
    register_trusted_program(script, definitions, definitions=definitions, entry="main")
    return script
