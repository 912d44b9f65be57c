"""The assert-test harness, run INSIDE the sandbox with no imports beyond ``os`` and ``sys``.

Protocol: stdin holds one job: a header line ``EXECGYM1 <nonce> <entry_point>
<program bytes> <tests bytes>`` followed by the program (prompt + completion) and the
test code, both UTF-8. The harness reads all of it, so stdin is at EOF before any
untrusted code runs. It executes the program, then the tests, then
``check(<entry_point>)``, and writes one report to fd 3: the nonce on the first line,
then a JSON object with ``verdict`` (``passed``, ``failed``, ``error`` or
``memory_exceeded``) and, for the last three, the exception's ``type``, ``message`` and
``traceback``. It then leaves with ``os._exit(0)`` so that no ``atexit`` hook or
``__del__`` of the solution runs after the report.

A run that never writes a report (``sys.exit(0)`` or ``os._exit(0)`` before the
asserts, a crash, a kill) is never a pass: the judge requires this report. Everything the
report needs is bound here before the solution runs, so monkeypatching ``os``, ``json``
or ``builtins`` afterwards does not change it. The harness imports nothing else (not
even ``json`` or ``traceback``, which cost about 10 ms of start-up each) so that a
rollout pays only for the modules its own code imports.
"""

import os
import sys

_write = os.write
_exit = os._exit
_type = type
_str = str
_len = len
_streams = (sys.stdout, sys.stderr)
_REPORT_FD = 3
_FILENAME = "solution.py"
_ESCAPES = {i: f"\\u{i:04x}" for i in range(32)}
_ESCAPES.update({ord('"'): '\\"', ord("\\"): "\\\\"})


def _json_string(text):
    return '"' + _str(text).translate(_ESCAPES) + '"'


def _traceback(error, lines):
    """Format a traceback like the standard one, showing only the solution's frames."""
    out = ["Traceback (most recent call last):\n"]
    tb = error.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename == _FILENAME:
            out.append('  File "%s", line %d, in %s\n' % (_FILENAME, tb.tb_lineno, code.co_name))
            if 0 < tb.tb_lineno <= _len(lines):
                out.append("    " + lines[tb.tb_lineno - 1].strip() + "\n")
        tb = tb.tb_next
    detail = _str(error)
    out.append(_type(error).__name__ + (": " + detail if detail else "") + "\n")
    return "".join(out)[-8000:]


def _flush():
    """Flush what the program printed: ``os._exit`` below would drop buffered output."""
    for stream in (*_streams, sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # a replaced or closed stream must not stop the report
            pass


def _report(nonce, verdict, error=None, lines=()):
    _flush()
    fields = ['"verdict": ' + _json_string(verdict)]
    if error is not None:
        fields.append('"type": ' + _json_string(_type(error).__name__))
        fields.append('"message": ' + _json_string(_str(error)[:2000]))
        fields.append('"traceback": ' + _json_string(_traceback(error, lines)))
    body = "{" + ", ".join(fields) + "}"
    _write(_REPORT_FD, nonce + b"\n" + body.encode("utf-8", "backslashreplace") + b"\n")
    _exit(0)


def main():
    data = sys.stdin.buffer.read()
    header, _, rest = data.partition(b"\n")
    _, nonce, entry_point, program_size, tests_size = header.split(b" ")
    program_size, tests_size = int(program_size), int(tests_size)
    program = rest[:program_size].decode("utf-8", "replace")
    tests = rest[program_size : program_size + tests_size].decode("utf-8", "replace")
    sys.stdin.close()
    sys.stdin = open(os.devnull)  # the solution may read stdin: it sees EOF
    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    source = program + "\n\n" + tests + "\n\ncheck(" + entry_point.decode("ascii") + ")\n"
    lines = source.splitlines()
    try:
        exec(compile(source, _FILENAME, "exec"), namespace)
    except AssertionError as error:
        _report(nonce, "failed", error, lines)
    except MemoryError as error:
        _report(nonce, "memory_exceeded", error, lines)
    except BaseException as error:  # SystemExit and KeyboardInterrupt too: never a pass
        _report(nonce, "error", error, lines)
    _report(nonce, "passed")


main()
