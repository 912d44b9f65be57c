r"""The assert-test harness, run INSIDE the sandbox: tests in one process, solution in another.

Protocol:

1. The very first thing it does is write ``START_MARKER`` to fd 3 (the report channel),
   before any untrusted code exists. A run whose channel lacks it never got as far as
   the harness (bwrap, setpriv or the interpreter failed): the judge calls that a
   ``sandbox_error``, and a solution cannot fake it. Then it makes itself non-dumpable
   (``prctl(PR_SET_DUMPABLE, 0)``), so a process of the same uid cannot open its
   ``/proc/<pid>/mem``, ``fd/`` or ``environ``.
2. stdin holds the job in two parts, each a 10-digit length then that many bytes. Part
   one, ``<entry point>\n<program>``, is the solution. The harness reads only part one,
   then forks the **solution process**: it closes the report channel and every other
   descriptor but stdout and stderr, puts ``/dev/null`` on stdin, and waits for
   commands on a pipe. Only then does the harness read part two, ``<nonce> <mode>
   <context size> <tests size> <code size> <magic> <state>\n<context><tests><code>
   <reference>``, so the tests, the expected values, the nonce and the reference never
   exist in the solution's memory (``<state>`` is ``fresh`` or ``shared``). ``<code>``
   is the context and tests compiled by the host and marshalled
   (``assert_tests.compiled_tests``), used when ``<magic>`` is this interpreter's
   bytecode version; else (or if empty) the harness compiles the text.
3. The harness loads the solution (``("load", ...)``: the names of the solution's module
   that the tests use come back with their kinds) and binds those names in the tests'
   namespace (:func:`bind_names`), then executes the context (the task's prompt,
   operator data) and the tests there and calls ``check(candidate)``, where
   ``candidate`` is a proxy: each call sends the arguments to the solution process and
   gets its answer back, marshalled as plain data (``None``, ``bool``, ``int``,
   ``float``, ``complex``, ``str``, ``bytes``, ``list``, ``tuple``, ``set``,
   ``frozenset``, ``dict``; exact types only; results at most 100 levels deep,
   arguments 250) plus the extensions of :class:`Solution` (objects of the tests'
   classes by value, the tests' functions, builtin types, standard modules, the
   solution's own names as :class:`Remote` recipes); arguments the call changed in
   place are patched back. A ``str`` subclass or an object overriding ``__eq__``
   becomes a ``tampered`` verdict naming the class; another object that is not plain
   data comes back as an opaque :class:`Remote`. The harness decodes what it receives
   into fresh builtin objects (or objects of the tests' own classes), so nothing the
   solution defines ever runs in the harness, and a malformed answer is ``tampered``.
   An exception raised by the solution is rebuilt as the builtin exception of that
   name (or ``SolutionError``, always for ``StopIteration``, which would steer the
   tests' loops), so tests that expect one still work; ``SystemExit``,
   ``KeyboardInterrupt`` or the solution process dying end the tests as an ``error``.
   With state ``fresh`` (part two's last header field), every call is served by a fork
   of the loaded solution process (:func:`make_call_forks`). A ``check`` that passes
   without calling the solution, or (when the host counted them) without running an
   ``assert``, makes the task ``invalid`` (``task_error``).
4. With a reference (part two ends with one), the reference runs in its own process
   first, against the same tests, and then the candidate: each process's CPU time and
   peak memory come from ``wait4``, measured in the same run under the same load. With
   mode ``cases``, each top-level statement of ``check`` is one case (rewritten by the
   judge into ``__execgym_case__(lambda: ...)``), and the harness counts how many pass.
5. It writes one report to fd 3: the nonce on a line, then a JSON object with
   ``verdict`` (``passed``, ``failed``, ``error``, ``tampered``, ``memory_exceeded`` or
   ``harness_error``), the exception's ``type``, ``message`` and ``traceback``,
   ``hack`` (what was detected), ``cases_passed``/``cases_total``, ``calls``, and
   ``cpu_s``/``maxrss_kb`` per process. It leaves with ``os._exit(0)``.

A run that never writes a report (the harness killed, a crash) is never a pass. Only the
harness holds fd 3, and the nonce is never in the solution's process, so printing or
writing forged reports reaches nothing that is read.

The harness imports only ``os``, ``sys`` and ``ctypes`` (for ``prctl``; the warm pool
has it loaded already), besides ``marshal`` and ``_frozen_importlib_external``, which
every CPython has loaded at start-up, so a rollout pays only for the modules its own code imports.
The codec, the frames and both sides of the process boundary are the parts before this
one in the script the sandbox runs (:mod:`.plain_data`, :mod:`.boundary`,
:mod:`.solution_side`, :mod:`.untrusted`: the bundle ``assert_runner`` of
:data:`execgym.guest.BUNDLES`); the relative imports below name what comes from each.
"""

import os
import sys

from .boundary import Remote, SolutionAborted, is_standard_module
from .plain_data import BUILTINS, format_traceback, make_codec, make_frames
from .untrusted import END_WAIT_S, Solution, make_non_dumpable, read_part

START_MARKER = b"EXECGYM-START\n"


def main():
    write, exit_now, open_fd, dup2, read = os.write, os._exit, os.open, os.dup2, os.read
    system = sys
    report_fd = 3
    write(report_fd, START_MARKER)
    codec = make_codec()
    frames = make_frames(read, write)
    _, read_exactly, _ = frames

    escapes = {i: "\\u%04x" % i for i in range(32)}
    escapes.update({ord('"'): '\\"', ord("\\"): "\\\\"})

    def json_string(value):
        return '"' + str(value).translate(escapes) + '"'

    nonce = b""

    def report(verdict, fields=()):
        for name in ("stdout", "stderr"):
            try:  # os._exit below would drop what was printed but not flushed
                getattr(system, name).flush()
            except BaseException:
                pass
        parts = ['"verdict": ' + json_string(verdict)]
        for key, value in fields:
            if value is None:
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                parts.append('"%s": %r' % (key, value))
            else:
                parts.append('"%s": %s' % (key, json_string(value)))
        body = "{" + ", ".join(parts) + "}"
        write(report_fd, nonce + b"\n" + body.encode("utf-8", "backslashreplace") + b"\n")
        exit_now(0)

    def part():
        return read_part(read_exactly)

    setup_error = make_non_dumpable()  # before the solution's process exists

    entry_point, _, program = part().partition(b"\n")
    entry_point = entry_point.decode("utf-8")
    candidate = Solution(program.decode("utf-8", "replace"), entry_point, codec, frames)
    del program
    header, _, rest = part().partition(b"\n")
    nonce, mode, context_size, tests_size, code_size, magic, state = header.split(b" ")
    fresh_state = state == b"fresh"
    context_size, tests_size, code_size = int(context_size), int(tests_size), int(code_size)
    context = rest[:context_size].decode("utf-8", "replace")
    tests = rest[context_size : context_size + tests_size].decode("utf-8", "replace")
    compiled = rest[context_size + tests_size : context_size + tests_size + code_size]
    reference = rest[context_size + tests_size + code_size :].decode("utf-8", "replace")
    mode = mode.decode()
    del rest, header
    if setup_error is not None:
        report("harness_error", [("type", "HarnessError"), ("message", repr(setup_error))])
    dup2(open_fd(os.devnull, os.O_RDONLY), 0)
    system.stdin = open(os.devnull)

    source = context + "\n\n" + tests + "\n"
    sources = {"tests.py": source.splitlines()}
    code = None
    if compiled and magic == bytecode_version():  # compiled by the host (the same source)
        try:
            code = marshal_loads(compiled)
        except (ValueError, EOFError, TypeError):
            code = None
    del compiled
    # The host's code counts the asserts it runs when they are the only way to fail.
    counted = code is not None and "__execgym_asserted__" in code.co_names
    if code is None:
        try:
            code = compile(source, "tests.py", "exec")
        except (SyntaxError, ValueError) as error:  # the task's fault, not the rollout's
            fields = [("type", type(error).__name__), ("message", str(error)[:2000])]
            report("task_error", fields)
    cases = [0, 0]
    asserted = [0]

    def count_assert():
        asserted[0] += 1
        return True

    wanted = global_names(code) - set(BUILTINS)

    def run_case(thunk):
        cases[1] += 1
        try:
            thunk()
        except (AssertionError, Exception) as error:
            if first_failure[0] is None:
                first_failure[0] = error
            return
        cases[0] += 1

    first_failure = [None]

    def run_tests(solution):
        """Run check() against ``solution``; the verdict and its fields."""
        namespace = {"__name__": "tests", "__builtins__": __builtins__}
        namespace["__execgym_asserted__"] = count_assert
        if mode == "cases":
            namespace["__execgym_case__"] = run_case
        first_failure[0] = None
        cases[0] = cases[1] = 0
        asserted[0] = 0
        try:
            found = solution.load(False, fresh_state, namespace, sorted(wanted))
            bind_names(solution, namespace, found, wanted)
            try:
                exec(code, namespace)  # the task's own code: its errors are the task's
            except Exception as error:
                if solution.problem is not None or hasattr(error, "execgym_solution"):
                    raise  # the solution's, raised through the names it gave the tests
                trace = format_traceback(error, sources)
                fields = [("type", type(error).__name__), ("message", str(error)[:2000])]
                report("task_error", [*fields, ("traceback", trace)])
            check = namespace.get("check")
            if not callable(check):
                report("task_error", [("type", "NoCheck"), ("message", "no check() in tests")])
            proxy = _proxy(solution)
            namespace[entry_point] = proxy  # check itself is kept: a solution may be `check`
            check(proxy)
            if first_failure[0] is not None:
                raise first_failure[0]
            if solution.problem is not None:  # the tests swallowed it: still not a pass
                raise SolutionAborted(solution.problem[2])
        except BaseException as error:
            return outcome(solution, error)
        if solution.calls == 0:
            return "task_error", [
                ("type", "NoCall"),
                ("message", "check() never called the solution: it would pass any solution"),
            ]
        if counted and asserted[0] == 0:
            return "task_error", [
                ("type", "NoAssertion"),
                ("message", "check() ran no assert statement: it would pass any solution"),
            ]
        return "passed", []

    def outcome(solution, error):
        if solution.problem is not None:
            verdict, name, message, trace, hack = solution.problem
            return verdict, [
                ("type", name),
                ("message", message[:2000]),
                ("traceback", trace),
                ("hack", hack),
            ]
        origin = getattr(error, "execgym_solution", None)
        if origin is not None:
            name, message, trace = origin
        else:
            name, message = type(error).__name__, str(error)[:2000]
            trace = format_traceback(error, sources)
        if name == "MemoryError":
            verdict = "memory_exceeded"
        elif isinstance(error, AssertionError) and origin is None:
            verdict = "failed"
        else:
            verdict = "error"
        return verdict, [("type", name), ("message", message), ("traceback", trace)]

    fields = []
    if reference:
        truth = Solution(reference, entry_point, codec, frames)
        verdict, _ = run_tests(truth)
        truth.stop(END_WAIT_S)
        fields += [
            ("reference_verdict", verdict),
            ("reference_cpu_s", truth.cpu_s),
            ("reference_maxrss_kb", truth.maxrss_kb),
        ]
    verdict, more = run_tests(candidate)
    if reference:  # measured only when compared: reaping orphans costs about 1 ms
        candidate.stop(END_WAIT_S)
    else:  # it leaves first, so the run's process count is the same every time
        candidate.finish(END_WAIT_S)
    fields += more
    fields += [
        ("state", "fresh" if fresh_state else "shared"),
        ("calls", candidate.calls),
        ("cpu_s", candidate.cpu_s),
        ("maxrss_kb", candidate.maxrss_kb),
    ]
    if mode == "cases":  # tests that never reached a case (the solution failed to load)
        total = cases[1] or 1
        fields += [("cases_passed", cases[0] if verdict != "passed" else total)]
        fields += [("cases_total", total)]
    report(verdict, fields)


def marshal_loads(data):
    import marshal  # built in, and loaded already: no import cost

    return marshal.loads(data)


def bytecode_version():
    """This interpreter's bytecode magic number, in hex (as ``importlib.util`` gives it)."""
    import _frozen_importlib_external  # loaded at start-up by every CPython

    return _frozen_importlib_external.MAGIC_NUMBER.hex().encode()


def _proxy(solution):
    def candidate(*args, **kwargs):
        return solution(*args, **kwargs)

    candidate.__name__ = candidate.__qualname__ = solution.entry_point
    candidate.__execgym_recipe__ = ("target",)  # passed as an argument: the solution's own
    return candidate


def global_names(code):
    """Every name the code (and the code it defines) reads or writes as a global."""
    names, codes = set(), [code] if code is not None else []
    while codes:
        found = codes.pop()
        names.update(found.co_names)
        codes.extend(c for c in found.co_consts if type(c) is type(found))
    return names


def bind_names(solution, namespace, found, wanted):
    """Give the tests the solution module's names they use (before the tests run).

    Functions, classes and other objects become :class:`Remote` names; plain data is
    copied; a standard-library module is imported here (never a file of the rollout).
    Only names the tests use (``wanted``, which has no builtins) are bound, never a
    dunder name (the harness's own ``__execgym_...`` hooks), whatever the solution's
    process answered; the tests' own definitions replace them.
    """
    if type(found) is not dict:
        found = {}
    for name, entry in found.items():
        if name not in wanted or name.startswith("__") or type(entry) is not tuple:
            continue
        if len(entry) != 2 or type(entry[0]) is not str:
            continue
        kind, value = entry
        if kind == "value":
            namespace[name] = value
        elif kind.startswith("module:"):
            module = kind[len("module:") :]
            if is_standard_module(module):
                __import__(module)
                namespace[name] = sys.modules[module]
        else:
            namespace[name] = Remote(solution, ("name", name), kind)


main()
