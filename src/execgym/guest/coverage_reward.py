r"""The coverage harness: the model's tests in one process, the reference in another.

Bundled after the assert harness (it uses its codec, frames and helpers), it
runs INSIDE the sandbox, for tasks where the model writes tests:

1. It writes the start marker, makes itself non-dumpable, imports coverage.py (shipped
   in ``/work/_cov``) and only then reads part one of the job, ``<entry point>\n<the
   model's tests>``, and forks the **tests process** (no report channel, stdin
   ``/dev/null``), which runs the model's tests with the entry point bound to a proxy.
2. It reads part two, ``<nonce>\n<reference>``, and runs the reference itself, under
   coverage: each call the tests make comes over the pipe as plain data and is answered
   with the reference's result (or its exception, rebuilt in the tests' process).
3. When the tests process says it is done (or dies), it reports the reference lines and
   arcs that were executed, ``tests_ok`` (what the tests process said) and the number
   of calls. Coverage is measured in this process, never in the tests', so a test can
   only earn it by calling the reference; the judge computes the percentages from the
   reference's own text.
"""

import os
import sys

from .assert_runner import START_MARKER
from .boundary import SolutionError
from .plain_data import BUILTINS, Refused, make_codec, make_frames
from .untrusted import fork_untrusted


def tests_process(tests, entry_point, answers, commands):
    """The tests' side: run the model's tests, calling the reference through the pipe."""
    dumps, loads = make_codec()
    send, _, receive = make_frames(os.read, os.write)

    def call(*args, **kwargs):
        send(commands, dumps(("call", list(args), kwargs)))
        answer = loads(receive(answers))
        if answer[0] == "raised":
            found = BUILTINS.get(answer[1])
            if isinstance(found, type) and issubclass(found, Exception):
                raise found(answer[2])
            raise SolutionError(answer[1] + ": " + answer[2])
        return answer[1]

    namespace = {"__name__": "tests", "__builtins__": __builtins__, entry_point: call}
    try:
        exec(compile(tests, "tests.py", "exec"), namespace)
        for name, value in list(namespace.items()):
            if name.startswith("test") and type(value).__name__ == "function":
                value()
        verdict = ("done", True, "")
    except BaseException as error:
        verdict = ("done", False, "%s: %s" % (type(error).__name__, str(error)[:500]))
    send(commands, dumps(verdict))
    os._exit(0)


def coverage_main():
    write, report_fd = os.write, 3
    write(report_fd, START_MARKER)
    codec = make_codec()
    dumps, loads = codec
    send, read_exactly, receive = make_frames(os.read, os.write)

    def part():
        size = read_exactly(0, 10)
        return read_exactly(0, int(size)) if size else b""

    setup_error = None
    try:
        import ctypes

        if ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")
        sys.path.insert(0, "/work/_cov")
        import coverage  # before the tests' process exists: it could rewrite these files
    except Exception as error:
        setup_error = error
    entry_point, _, tests = part().partition(b"\n")
    entry_point = entry_point.decode()
    # The tests' process reads answers on its fd 4 and writes calls on its fd 5.
    _, answer_write, command_read = fork_untrusted(
        tests_process, tests.decode("utf-8", "replace"), entry_point
    )
    nonce, _, reference = part().partition(b"\n")
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)

    def report(fields):
        body = "{" + ", ".join('"%s": %s' % item for item in fields) + "}"
        write(report_fd, nonce + b"\n" + body.encode("utf-8", "backslashreplace") + b"\n")
        os._exit(0)

    def text(value):
        escapes = {i: "\\u%04x" % i for i in range(32)}
        escapes.update({ord('"'): '\\"', ord("\\"): "\\\\"})
        return '"' + str(value).translate(escapes) + '"'

    if setup_error is not None:
        report([("verdict", '"harness_error"'), ("message", text(repr(setup_error)))])
    filename = "/work/reference.py"
    cov = coverage.Coverage(branch=True, data_file=None, config_file=False, include=[filename])
    namespace = {"__name__": "reference", "__builtins__": __builtins__}
    cov.start()
    try:
        exec(compile(reference.decode("utf-8", "replace"), filename, "exec"), namespace)
        target = namespace.get(entry_point)
    except BaseException as error:
        cov.stop()
        why = text("the reference failed: %r" % error)
        report([("verdict", '"harness_error"'), ("message", why)])
    calls, tests_ok, message = 0, False, "the tests' process ended without saying it was done"
    while True:
        data = receive(command_read)
        if data is None:
            break
        try:
            request = loads(data)
            kind = request[0]
        except (Refused, TypeError, IndexError):
            message = "malformed message from the tests' process"
            break
        if kind == "done":
            tests_ok, message = request[1] is True, str(request[2])
            break
        calls += 1
        try:
            result = target(*request[1], **request[2])
            payload = dumps(("ok", result))
        except BaseException as error:
            payload = dumps(("raised", type(error).__name__, str(error)[:2000], "", False))
        send(answer_write, payload)
    cov.stop()
    data = cov.get_data()
    lines = sorted(data.lines(filename) or [])
    arcs = sorted(data.arcs(filename) or [])
    report(
        [
            ("verdict", '"passed"' if tests_ok else '"failed"'),
            ("message", text(message)),
            ("calls", calls),
            ("lines", "[" + ", ".join(str(n) for n in lines) + "]"),
            ("arcs", "[" + ", ".join("[%d, %d]" % arc for arc in arcs) + "]"),
        ]
    )


coverage_main()
