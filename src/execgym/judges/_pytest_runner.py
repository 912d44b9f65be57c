"""The pytest harness, run INSIDE the sandbox.

Protocol: it writes ``START_MARKER`` to fd 3 first. stdin holds one line
``EXECGYM-PYTEST1 <nonce> <site-packages dir> <stop at first failure: 0|1>`` followed by
the test file names, one a line; fd 0 is then put on ``/dev/null``. It imports pytest
from the given site-packages (with plugin autoloading off, so only pytest's own plugins
load) before any file of the solution can be imported, remembers the functions that
make and log test reports and ``unittest.TestCase``'s assertions, runs the tests with a
plugin that records every collection error and every test's outcome, and writes one
report to fd 3: the nonce on a line, then a JSON object ``{"exit_code", "tests":
[{"name", "outcome", "message"}], "collection_errors": [{"name", "message"}],
"tampered"}``. ``tampered`` is true when
the solution replaced one of them while it ran. If pytest cannot be imported (before
any solution code exists), the report is ``{"harness_error": ...}`` instead.
"""

import contextlib
import os
import sys

START_MARKER = b"EXECGYM-START\n"


def main():
    write, exit_now, text, get, raw = os.write, os._exit, str, getattr, vars
    write(3, START_MARKER)
    lines = sys.stdin.buffer.read().decode("utf-8").splitlines()
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    sys.stdin = open(os.devnull)
    _, nonce, libraries, stop_first = lines[0].split(" ")
    test_files = [line for line in lines[1:] if line]
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    sys.path.append(libraries)
    try:
        import unittest

        import _pytest.nodes
        import _pytest.reports
        import _pytest.runner
        import pytest
    except BaseException as error:  # before any solution code: our failure, not the model's
        body = '{"harness_error": "cannot import pytest: ' + type(error).__name__ + '"}'
        write(3, nonce.encode("ascii") + b"\n" + body.encode("ascii") + b"\n")
        exit_now(0)

    watched = (
        (_pytest.reports.TestReport, "from_item_and_call"),
        (_pytest.runner, "call_and_report"),
        (_pytest.runner, "pytest_runtest_makereport"),
        (_pytest.runner, "runtestprotocol"),
        (_pytest.nodes.Node, "ihook"),
        *(
            (unittest.TestCase, name)
            for name in sorted(raw(unittest.TestCase))
            if name.startswith(("assert", "fail", "_base"))
        ),
    )
    originals = [raw(owner).get(name) for owner, name in watched]
    tests, errors = [], []

    escapes = {i: f"\\u{i:04x}" for i in range(32)}
    escapes.update({ord('"'): '\\"', ord("\\"): "\\\\"})

    def string(value):
        return '"' + text.translate(text(value), escapes) + '"'

    def entry(fields):
        return "{" + ", ".join(string(k) + ": " + string(v) for k, v in fields) + "}"

    class Recorder:
        def pytest_collectreport(self, report):
            if report.failed:
                errors.append((report.nodeid or "<session>", text(report.longreprtext)[-4000:]))

        def pytest_runtest_logreport(self, report):
            outcome = report.outcome
            if get(report, "wasxfail", None) is not None:
                outcome = "skipped" if report.skipped else "passed"
            elif report.when != "call" and outcome == "failed":
                outcome = "error"
            elif report.when != "call" and outcome == "passed":
                return
            message = text(report.longreprtext)[-4000:] if outcome != "passed" else ""
            tests.append((report.nodeid, outcome, message))

    args = ["-q", "-p", "no:cacheprovider", "--rootdir", os.getcwd(), "-o", "addopts="]
    args += ["-x"] if stop_first == "1" else []
    sys.path.append(os.getcwd())
    code = pytest.main([*args, *test_files], plugins=[Recorder()])
    tampered = any(
        raw(owner).get(name) is not original
        for (owner, name), original in zip(watched, originals, strict=True)
    )
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    body = (
        '{"exit_code": '
        + text(int(code))
        + ', "tampered": '
        + ("true" if tampered else "false")
        + ', "tests": ['
        + ", ".join(entry(zip(("name", "outcome", "message"), t, strict=False)) for t in tests)
        + '], "collection_errors": ['
        + ", ".join(entry(zip(("name", "message"), e, strict=False)) for e in errors)
        + "]}"
    )
    write(3, nonce.encode("ascii") + b"\n" + body.encode("utf-8", "backslashreplace") + b"\n")
    exit_now(0)


main()
