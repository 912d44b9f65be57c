"""The unittest harness (BigCodeBench style), run INSIDE the sandbox.

Protocol: it writes ``START_MARKER`` to fd 3 first. stdin holds one line
``EXECGYM-UNITTEST1 <nonce> <site-packages dir> <test class name> <solution lines>``
(the program's first lines that are the solution, the rest being the tests) and then the
program (UTF-8): the solution followed by the unittest code, one source, as
BigCodeBench's own harness (``bigcodebench.eval.unsafe_execute``) runs it; fd 0 is then
put on ``/dev/null``. As upstream, it sets ``TZ=UTC`` and ``OMP_NUM_THREADS=1`` (and
``MPLBACKEND=Agg``, ``HOME`` under ``/tmp`` and ``MPLCONFIGDIR``: the work dir's
``mplconfig``, where the judge puts a prebuilt font list, else under ``/tmp``), makes a
fresh empty directory the working directory, executes the program as the module
``__test__`` with its standard output and error swallowed, loads the test class with
``unittest.TestLoader`` and runs it. It then writes one report to fd 3: the nonce on a
line, then a JSON object ``{"exit_code", "tests": [{"name", "outcome", "message"}],
"collection_errors": [{"name", "message"}], "tampered", "output"}`` (the shape of the
pytest harness's report). ``collection_errors`` holds the exception of a program that
does not compile or raises, or has no such test class; ``tampered`` is true when the
code replaced one of unittest's own functions (the ``TestCase`` assertions, the result
and suite machinery, the skip decorators, ``__build_class__``) or the test class is not
a real ``unittest.TestCase``. A ``SkipTest`` raised through any code but the tests' own
and unittest's (the solution's functions, code it compiled) is that test's ``error``,
not a skip: a skip the solution raises is not a pass. The tests
and the solution share one process and one namespace: that is the point (the tests
check the DataFrames and figures the solution returns) and its limit (a solution
walking the interpreter's frames could find the nonce).
"""

import os
import sys

START_MARKER = b"EXECGYM-START\n"
OUTPUT_TAIL = 2000


def main():
    write, exit_now, text, raw = os.write, os._exit, str, vars
    write(3, START_MARKER)
    data = sys.stdin.buffer.read()
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    sys.stdin = open(os.devnull)
    header, _, program = data.partition(b"\n")
    _, nonce, libraries, class_name, solution_lines = header.decode("ascii").split(" ")
    solution_lines = int(solution_lines)
    program = program.decode("utf-8", "surrogatepass")
    del data

    import io
    import tempfile
    import time
    import types

    fonts = os.path.join(os.getcwd(), "mplconfig")  # a prebuilt font list, if the judge sent one
    home = tempfile.mkdtemp(prefix="execgym-home-")
    os.environ.update(
        {
            "TZ": "UTC",
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "TF_CPP_MIN_LOG_LEVEL": "3",
            "MPLBACKEND": "Agg",
            "MPLCONFIGDIR": fonts if os.path.isdir(fonts) else os.path.join(home, "matplotlib"),
            "HOME": home,
        }
    )
    time.tzset()
    sys.path.append(libraries)
    import builtins
    import unittest
    import unittest.case
    import unittest.loader
    import unittest.result
    import unittest.suite

    dunders = ("__call__", "__init__", "__init_subclass__", "__unittest_skip__")
    watched = [
        (owner, name)
        for owner in (
            unittest.TestCase,
            unittest.TestResult,
            unittest.TestSuite,
            unittest.suite.BaseTestSuite,
            unittest.TestLoader,
            unittest.case._Outcome,
            unittest,  # skip, skipIf, SkipTest...: the module functions the tests use
            unittest.case,  # _addSkip, _Outcome...
            unittest.suite,
            unittest.loader,
            unittest.result,
        )
        for name in sorted(raw(owner))
        if not name.startswith("__") or name in dunders
    ]
    for name in dunders:  # absent until someone sets them: None is the original
        watched.append((unittest.TestCase, name))
    watched.append((builtins, "__build_class__"))  # every class statement of the tests
    originals = [raw(owner).get(name) for owner, name in watched]
    real_case = unittest.TestCase

    class Swallowed(io.StringIO):
        """Upstream's write-only stream: the solution's prints go nowhere, reads fail."""

        def read(self, *args, **kwargs):
            raise OSError("stdin is not readable")

        readline = readlines = read

        def readable(self):
            return False

    escapes = {i: f"\\u{i:04x}" for i in range(32)}
    escapes.update({ord('"'): '\\"', ord("\\"): "\\\\"})

    def string(value):
        return '"' + text.translate(text(value), escapes) + '"'

    def entry(fields):
        return "{" + ", ".join(string(k) + ": " + string(v) for k, v in fields) + "}"

    tests, errors = [], []
    program_code = [None]  # the compiled program: its test-side code objects are trusted
    test_codes = set()
    unittest_codes = {}  # id -> code object (kept alive, so the ids stay unique)
    unittest_dir = os.path.dirname(unittest.__file__) + os.sep

    def solution_skip():
        """Where the solution's code raised the SkipTest being handled, or ``None``.

        A skip counts only when every frame from the test down to the ``raise`` is the
        tests' own code (compiled from the lines after the solution) or unittest's; a
        decorator's skip raises nothing. Any other frame (the solution's functions, code
        it compiled at run time, a library it called) makes the skip the solution's.
        """
        error = sys.exc_info()[1]
        if not isinstance(error, unittest.SkipTest):
            return None
        trace = error.__traceback__
        while trace is not None:
            code = trace.tb_frame.f_code
            if id(code) not in test_codes and id(code) not in unittest_codes:
                return f"{code.co_filename} line {trace.tb_lineno} ({code.co_name})"
            trace = trace.tb_next
        return None

    class Recorder(unittest.TestResult):
        def _name(self, test):
            return text(test.id()).split(".", 1)[-1]

        def _text(self, test, err):
            return self._exc_info_to_string(err, test)[-4000:]

        def addSuccess(self, test):
            super().addSuccess(test)
            tests.append((self._name(test), "passed", ""))

        def addFailure(self, test, err):
            super().addFailure(test, err)
            tests.append((self._name(test), "failed", self._text(test, err)))

        def addError(self, test, err):
            super().addError(test, err)
            tests.append((self._name(test), "error", self._text(test, err)))

        def addSkip(self, test, reason):
            where = solution_skip()
            if where is not None:  # a skip the solution raised is not a pass
                message = (
                    f"the solution's code raised unittest.SkipTest({text(reason)[:200]!r}) "
                    f"at {where}: a skip raised by the solution is not a pass"
                )
                tests.append((self._name(test), "error", message))
                return
            super().addSkip(test, reason)
            tests.append((self._name(test), "skipped", text(reason)))

        def addExpectedFailure(self, test, err):
            super().addExpectedFailure(test, err)
            tests.append((self._name(test), "passed", "expected failure"))

        def addUnexpectedSuccess(self, test):
            super().addUnexpectedSuccess(test)
            tests.append((self._name(test), "passed", "unexpected success"))

        def addSubTest(self, test, subtest, err):
            super().addSubTest(test, subtest, err)
            if err is not None:
                failed = issubclass(err[0], test.failureException)
                outcome = "failed" if failed else "error"
                tests.append((self._name(subtest), outcome, self._text(test, err)))

    recorder_methods = dict(raw(Recorder))
    work = tempfile.mkdtemp(prefix="execgym-test-")
    os.chdir(work)
    module = types.ModuleType("__test__")
    module.__dict__.update(
        {"__file__": "__test__.py", "__package__": None, "__doc__": None}
        | {"sys": sys, "os": os, "environ": os.environ}
    )
    swallowed = Swallowed()
    streams = sys.stdout, sys.stderr
    foreign_class = False
    try:
        sys.stdout = sys.stderr = swallowed
        try:
            program_code[0] = compile(program, "__test__.py", "exec")
            # unittest's own code objects, by identity, before the solution runs: code it
            # compiles under unittest's file names is not unittest's
            import gc

            pending = [
                f.__code__
                for f in gc.get_objects()
                if type(f) is types.FunctionType and f.__code__.co_filename.startswith(unittest_dir)
            ]
            while pending:
                code = pending.pop()
                if id(code) not in unittest_codes:
                    unittest_codes[id(code)] = code
                    pending.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
            pending = [program_code[0]]
            while pending:  # before any of the solution's code runs
                for constant in pending.pop().co_consts:
                    if isinstance(constant, types.CodeType):
                        pending.append(constant)
                        if constant.co_firstlineno > solution_lines:
                            test_codes.add(id(constant))
            exec(program_code[0], module.__dict__)
            sys.modules["__test__"] = module
            cases = module.__dict__.get(class_name)
            if not isinstance(cases, type):
                raise NameError(f"the tests define no test class {class_name}")
            if not issubclass(cases, real_case):
                foreign_class = True
                raise TypeError(f"{class_name} is not a unittest.TestCase")
            suite = unittest.TestLoader().loadTestsFromTestCase(cases)
            suite.run(Recorder())
        except BaseException as error:  # the program itself failed: no test ran
            import traceback

            message = "".join(traceback.format_exception(error))[-4000:]
            errors.append(("__test__.py", message))
    finally:
        sys.stdout, sys.stderr = streams
    tampered = foreign_class or any(
        raw(owner).get(name) is not original
        for (owner, name), original in zip(watched, originals, strict=True)
    )
    tampered = tampered or any(raw(Recorder).get(k) is not v for k, v in recorder_methods.items())
    try:
        output = text(io.StringIO.getvalue(swallowed))[-OUTPUT_TAIL:]
    except BaseException:
        output = ""
    body = (
        '{"exit_code": 0, "tampered": '
        + ("true" if tampered else "false")
        + ', "output": '
        + string(output)
        + ', "tests": ['
        + ", ".join(entry(zip(("name", "outcome", "message"), t, strict=False)) for t in tests)
        + '], "collection_errors": ['
        + ", ".join(entry(zip(("name", "message"), e, strict=False)) for e in errors)
        + "]}"
    )
    write(3, nonce.encode("ascii") + b"\n" + body.encode("utf-8", "backslashreplace") + b"\n")
    exit_now(0)


main()
