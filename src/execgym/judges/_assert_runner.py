"""The assert-test harness, run INSIDE the sandbox with no imports beyond ``os`` and ``sys``.

Protocol:

1. The very first thing it does is write ``START_MARKER`` to fd 3 (the report channel),
   before any untrusted code exists in the process. A run whose channel lacks it never
   got as far as the harness (bwrap, setpriv or the interpreter failed): the judge calls
   that a ``sandbox_error``, never the model's fault, and a solution cannot fake it.
2. stdin holds one job: a header line ``EXECGYM1 <nonce> <entry_point> <program bytes>
   <tests bytes>`` then the program (prompt + completion) and the tests, both UTF-8. The
   harness reads it all, then puts ``/dev/null`` on fd 0, so the job (the nonce, the
   tests) cannot be read again by seeking back.
3. It executes the program, the tests and ``check(<entry_point>)``, and writes one
   report to fd 3: the nonce on a line, then a JSON object with ``verdict`` (``passed``,
   ``failed``, ``error`` or ``memory_exceeded``) and, for the last three, the exception's
   ``type``, ``message`` and ``traceback``. It then leaves with ``os._exit(0)``, so no
   ``atexit`` hook or ``__del__`` of the solution runs after the report.

A run that never writes a report (``sys.exit(0)`` or ``os._exit(0)`` before the
asserts, a crash, a kill) is never a pass. Everything the report needs lives in local
variables of :func:`main`, bound before the solution runs, so replacing names in
``__main__``, ``os``, ``json`` or ``builtins`` changes nothing. What this in-process
harness cannot stop is a solution that walks the interpreter's own frames or memory to
find the nonce; that needs the tests and the solution in separate processes.

The harness imports nothing else (not even ``json`` or ``traceback``, which cost about
10 ms of start-up each), so a rollout pays only for the modules its own code imports.
"""

import os
import sys

START_MARKER = b"EXECGYM-START\n"


def main():
    write, exit_now, open_fd, dup2 = os.write, os._exit, os.open, os.dup2
    text, type_of, length, system = str, type, len, sys
    streams = (sys.stdout, sys.stderr)
    report_fd, filename = 3, "solution.py"
    write(report_fd, START_MARKER)

    escapes = {i: "\\u%04x" % i for i in range(32)}
    escapes.update({ord('"'): '\\"', ord("\\"): "\\\\"})

    def json_string(value):
        return '"' + text(value).translate(escapes) + '"'

    def format_traceback(error, lines):
        out = ["Traceback (most recent call last):\n"]
        tb = error.__traceback__
        while tb is not None:
            code = tb.tb_frame.f_code
            if code.co_filename == filename:
                out.append('  File "%s", line %d, in %s\n' % (filename, tb.tb_lineno, code.co_name))
                if 0 < tb.tb_lineno <= length(lines):
                    out.append("    " + lines[tb.tb_lineno - 1].strip() + "\n")
            tb = tb.tb_next
        detail = text(error)
        out.append(type_of(error).__name__ + (": " + detail if detail else "") + "\n")
        return "".join(out)[-8000:]

    def report(verdict, error=None, lines=()):
        for stream in (*streams, system.stdout, system.stderr):
            try:  # os._exit below would drop what the program printed but did not flush
                stream.flush()
            except BaseException:
                pass
        fields = ['"verdict": ' + json_string(verdict)]
        if error is not None:
            fields.append('"type": ' + json_string(type_of(error).__name__))
            fields.append('"message": ' + json_string(text(error)[:2000]))
            fields.append('"traceback": ' + json_string(format_traceback(error, lines)))
        body = "{" + ", ".join(fields) + "}"
        write(report_fd, nonce + b"\n" + body.encode("utf-8", "backslashreplace") + b"\n")
        exit_now(0)

    data = sys.stdin.buffer.read()
    dup2(open_fd(os.devnull, os.O_RDONLY), 0)  # the job cannot be re-read from fd 0
    sys.stdin = open(os.devnull)  # the solution may read stdin: it sees EOF
    header, _, rest = data.partition(b"\n")
    _, nonce, entry_point, program_size, tests_size = header.split(b" ")
    program_size, tests_size = int(program_size), int(tests_size)
    program = rest[:program_size].decode("utf-8", "replace")
    tests = rest[program_size : program_size + tests_size].decode("utf-8", "replace")
    del data, rest, header
    source = program + "\n\n" + tests + "\n\ncheck(" + entry_point.decode("utf-8") + ")\n"
    lines = source.splitlines()
    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        exec(compile(source, filename, "exec"), namespace)
    except AssertionError as error:
        report("failed", error, lines)
    except MemoryError as error:
        report("memory_exceeded", error, lines)
    except BaseException as error:  # SystemExit and KeyboardInterrupt too: never a pass
        report("error", error, lines)
    report("passed")


main()
