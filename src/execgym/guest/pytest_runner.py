"""The pytest harness, run INSIDE the sandbox, in one of two modes.

Protocol: it writes ``START_MARKER`` to fd 3 and makes itself non-dumpable first.
stdin holds the job in two parts, each a 10-digit length then that many bytes. Part
one is ``<mode> <site-packages dir> <stop at first failure: 0|1>`` and then the
rollout's Python files, one a line. In mode ``proxy`` the harness forks the
**solution process** now (no report channel, stdin ``/dev/null``), before it reads part
two, ``<nonce>`` and the test file names, one a line. fd 0 is then put on
``/dev/null``. It imports pytest from the given site-packages (plugin autoloading off,
so only pytest's own plugins load), runs the tests with a plugin that records every
collection error and every test's outcome, and writes one report to fd 3: the nonce on
a line, then a JSON object ``{"mode", "exit_code", "tests": [{"name", "outcome",
"message"}], "collection_errors": [{"name", "message"}], "tampered", "hack"}``. If
pytest cannot be imported, the report is ``{"harness_error": ...}`` instead.

Mode ``proxy``: pytest and the tests run in the harness, and the rollout's modules are
never executed there. Importing one gives a proxy module built from the module's
*parsed* source (never run): its top-level names, its literal constants (bound as
values) and its exception classes (local classes of the same names and builtin bases,
so ``pytest.raises(solution.MyError)`` works). Every other name is a :class:`ProxyRemote`
that forwards calls, attribute reads, ``len``, ``iter``, ``next``, indexing, ``in``,
``bool``, ``str``, ``int`` and ``float`` to the solution process as plain data; results
come back as plain data, or as handles (new remotes) for other objects. The solution
process imports the rollout's modules only when pytest has finished collecting, so the
rollout's code first runs after every test module, conftest and plugin was loaded from
disk, and no bytecode cache is read. From then on the harness imports only from
read-only directories and from copies of the task's own files taken before
(:class:`ImportGuard`), never a module the rollout wrote into a writable directory.
Comparing a remote object with ``==`` is identity, never the solution's ``__eq__``. A
result subclassing a builtin type (an always-equal ``str``), or a forged answer on the
pipe, is ``tampered``.

Mode ``in_process``: pytest and the rollout share this process, as tests that need the
rollout's real objects require. The harness remembers the functions that make and log
test reports and ``unittest.TestCase``'s assertions, and ``tampered`` says whether the
solution replaced one of them. A skip (``pytest.skip``, ``unittest.SkipTest``) raised
through any frame but the task's test files', pytest's and the standard library's is
that test's failure: a skip raised by the rollout is not a pass.
"""

import contextlib
import os
import sys

from .plain_data import make_codec, make_frames
from .pytest_proxy import ImportGuard, ModuleServer
from .untrusted import make_non_dumpable, read_part

START_MARKER = b"EXECGYM-START\n"


def main():
    write, exit_now, text, get, raw = os.write, os._exit, str, getattr, vars
    write(3, START_MARKER)
    setup_error = make_non_dumpable()
    codec, frames = make_codec(), make_frames(os.read, write)
    lines = read_part(frames[1]).decode("utf-8").splitlines()
    mode, libraries, stop_first = lines[0].split(" ")
    server = ModuleServer(lines[1:], libraries, codec, frames) if mode == "proxy" else None
    guard = ImportGuard(lines[1:])
    nonce, *test_files = read_part(frames[1]).decode("utf-8").splitlines()
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    sys.stdin = open(os.devnull)

    def finish(body):
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        write(3, nonce.encode("ascii") + b"\n" + body.encode("utf-8", "backslashreplace") + b"\n")
        exit_now(0)

    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    sys.path.append(libraries)
    try:
        if setup_error is not None:
            raise setup_error
        import unittest

        import _pytest.nodes
        import _pytest.reports
        import _pytest.runner
        import pytest
    except BaseException as error:  # before any solution code: our failure, not the model's
        finish('{"harness_error": "cannot import pytest: ' + type(error).__name__ + '"}')

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

    here = os.getcwd()
    own_files = {os.path.join(here, name) for name in test_files}
    own_dirs = (libraries + os.sep, os.path.dirname(os.__file__) + os.sep)
    skips = (unittest.SkipTest, pytest.skip.Exception)

    def rollout_skip(excinfo):
        """Where the rollout's code raised the skip ending a test (mode in_process), or None.

        A skip counts only when every frame from pytest down to the ``raise`` is the
        task's test files', pytest's or the standard library's; any other (the
        rollout's modules, code it compiled) makes it the rollout's: not a pass.
        """
        if server is not None or excinfo is None or not isinstance(excinfo.value, skips):
            return None
        trace = excinfo.value.__traceback__
        while trace is not None:
            name = trace.tb_frame.f_code.co_filename
            if name not in own_files and not name.startswith(own_dirs):
                return f"{name} line {trace.tb_lineno}"
            trace = trace.tb_next
        return None

    class Recorder:
        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_makereport(self, item, call):
            where = rollout_skip(call.excinfo)  # before unittest's plugin converts SkipTest
            outcome = yield
            if where is not None:
                report = outcome.get_result()
                report.outcome = "failed"
                report.longrepr = (
                    f"the rollout's code raised a skip ({type(call.excinfo.value).__name__}) "
                    f"at {where}: a skip raised by the rollout is not a pass"
                )

        def pytest_sessionstart(self, session):
            if server is not None:  # before pytest's assertion-rewriting import hook
                sys.meta_path.remove(server)
                sys.meta_path.insert(0, server)

        def pytest_collectreport(self, report):
            if report.failed:
                errors.append((report.nodeid or "<session>", text(report.longreprtext)[-4000:]))

        def pytest_collection_finish(self, session):
            if server is not None:
                guard.install(os.getcwd())  # before any of the rollout's code runs
                error = server.start()
                if error is not None:
                    trace = get(error, "execgym_solution", ("", "", ""))[2]
                    problem = server.solution.problem
                    what = problem[1:3] if problem else (type(error).__name__, error)
                    message = trace or "%s: %s" % what
                    errors.append(("<rollout modules %s>" % ", ".join(server.imported), message))

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
    if server is not None:
        sys.meta_path.insert(0, server)
        # No bytecode cache: one the rollout wrote could stand in for a module the tests
        # import later (no one can create a directory under /proc).
        sys.dont_write_bytecode, sys.pycache_prefix = True, "/proc/execgym-no-bytecode"
    else:
        sys.path.append(os.getcwd())
    code = pytest.main([*args, *test_files], plugins=[Recorder()])
    hack = None
    if server is not None and server.solution.problem is not None:
        if server.solution.problem[0] == "tampered":
            hack = server.solution.problem[4] or "tampered"
    elif server is None and any(
        raw(owner).get(name) is not original
        for (owner, name), original in zip(watched, originals, strict=True)
    ):
        hack = "patched pytest's report functions"
    finish(
        '{"mode": '
        + string(mode)
        + ', "exit_code": '
        + text(int(code))
        + ', "tampered": '
        + ("true" if hack else "false")
        + (', "hack": ' + string(hack) if hack else "")
        + ', "tests": ['
        + ", ".join(entry(zip(("name", "outcome", "message"), t, strict=False)) for t in tests)
        + '], "collection_errors": ['
        + ", ".join(entry(zip(("name", "message"), e, strict=False)) for e in errors)
        + "]}"
    )


main()
