"""The assert-test harness, run INSIDE the sandbox with only the standard library.

Protocol: it reads one JSON job from stdin (``nonce``, ``program``, ``tests``,
``entry_point``), so stdin is at EOF before any untrusted code runs. It executes the
program (prompt + completion), then the tests, then ``check(<entry_point>)``, and writes
one report to fd 3: the nonce on the first line, then a JSON object with ``verdict``
(``passed``, ``failed``, ``error`` or ``memory_exceeded``) and, for the last three, the
exception's ``type``, ``message`` and ``traceback``. It then leaves with ``os._exit(0)``
so no ``atexit`` hook or ``__del__`` of the solution runs after the report.

A run that never writes a report (``sys.exit(0)`` or ``os._exit(0)`` before the
asserts, a crash, a kill) is never a pass: the judge requires this report. Every
function the report needs is bound here, before the solution runs, so monkeypatching
``os``, ``json`` or ``builtins`` afterwards does not change it.
"""

import json
import linecache
import os
import sys
import traceback

_write = os.write
_exit = os._exit
_dumps = json.dumps
_format = traceback.format_exception
_isinstance = isinstance
_str = str
_type = type
_REPORT_FD = 3
_FILENAME = "solution.py"


def _describe(error, verdict):
    frames = _format(_type(error), error, error.__traceback__)
    # Drop this harness's own frames: keep the line "Traceback..." and what follows ours.
    kept = [frames[0]] + [f for f in frames[1:] if 'runner.py", line' not in f]
    return {
        "verdict": verdict,
        "type": _type(error).__name__,
        "message": _str(error)[:2000],
        "traceback": "".join(kept)[-8000:],
    }


def _report(nonce, payload):
    _write(_REPORT_FD, nonce + b"\n" + _dumps(payload).encode("utf-8") + b"\n")
    _exit(0)


def main():
    job = json.loads(sys.stdin.buffer.read())
    nonce = job.pop("nonce").encode("ascii")
    sys.stdin.close()
    sys.stdin = open(os.devnull)  # noqa: SIM115 - the solution may read stdin: it sees EOF
    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    source = job["program"] + "\n\n" + job["tests"] + "\n\ncheck(" + job["entry_point"] + ")\n"
    # Register the source so that tracebacks show the failing lines.
    linecache.cache[_FILENAME] = (len(source), None, source.splitlines(True), _FILENAME)
    try:
        code = compile(source, _FILENAME, "exec")
        exec(code, namespace)
    except AssertionError as error:
        _report(nonce, _describe(error, "failed"))
    except MemoryError as error:
        _report(nonce, _describe(error, "memory_exceeded"))
    except BaseException as error:  # SystemExit and KeyboardInterrupt too: never a pass
        _report(nonce, _describe(error, "error"))
    _report(nonce, {"verdict": "passed"})


main()
