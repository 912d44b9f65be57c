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
   <context size> <tests size>\n<context><tests><reference>``, so
   the tests, the expected values, the nonce and the reference never exist in the
   solution's memory.
3. The harness executes the context (the task's prompt, operator data) and the tests
   in its own namespace and calls ``check(candidate)``, where ``candidate`` is a proxy:
   each call sends the arguments to the solution process and gets its answer back,
   both marshalled as plain data (``None``, ``bool``, ``int``, ``float``, ``complex``,
   ``str``, ``bytes``, ``list``, ``tuple``, ``set``, ``frozenset``, ``dict``; exact
   types only, at most 100 levels deep). Anything else is refused: a custom class, a
   ``str`` subclass, an object overriding ``__eq__`` becomes a ``tampered`` verdict
   naming the class; another type (a generator, a ``map``) an ``error``. The harness
   decodes what it receives into fresh builtin objects, so nothing the solution
   defines ever runs in the harness, and a malformed answer is ``tampered`` too.
   An exception raised by the solution is rebuilt as the builtin exception of that
   name (or ``SolutionError``), so tests that expect one still work; ``SystemExit``,
   ``KeyboardInterrupt`` or the solution process dying end the tests as an ``error``.
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
has it loaded already), so a rollout pays only for the modules its own code imports.
"""

import os
import sys

START_MARKER = b"EXECGYM-START\n"
MAX_DEPTH = 100
PLAIN = "None, bool, int, float, complex, str, bytes, list, tuple, set, frozenset, dict"


class Refused(Exception):
    """A value that is not plain data (encoding) or a malformed message (decoding)."""


def make_codec():
    """Encoder and decoder of plain data, bound to local names before any solution runs."""
    type_of, length, join = type, len, "".join
    NoneType = type(None)

    def encode(value, out, depth):
        kind = type_of(value)
        if depth > MAX_DEPTH:
            raise Refused("nested deeper than %d levels (or refers to itself)" % MAX_DEPTH)
        if kind is NoneType:
            out.append("N")
        elif kind is bool:
            out.append("T" if value else "F")
        elif kind is int:
            out.append("i%x;" % value)
        elif kind is float:
            out.append("f" + value.hex() + ";")
        elif kind is str:
            out.append("s%d:" % length(value))
            out.append(value)
        elif kind is bytes:
            out.append("b%d:" % length(value))
            out.append(value.decode("latin-1"))
        elif kind is complex:
            out.append("c" + value.real.hex() + "," + value.imag.hex() + ";")
        elif kind is list or kind is tuple or kind is set or kind is frozenset:
            tag = {list: "l", tuple: "t", set: "S", frozenset: "z"}[kind]
            out.append("%s%d:" % (tag, length(value)))
            for item in value:
                encode(item, out, depth + 1)
        elif kind is dict:
            out.append("d%d:" % length(value))
            for key, item in value.items():
                encode(key, out, depth + 1)
                encode(item, out, depth + 1)
        else:
            plain = as_plain(value, kind)
            if plain is None:
                raise Refused(kind)
            encode(plain, out, depth + 1)

    def dumps(value):
        out = []
        encode(value, out, 0)
        return join(out).encode("utf-8", "surrogatepass")

    def number(text, start, end_char):
        end = text.index(end_char, start)
        return text[start:end], end + 1

    def decode(text, at, depth):
        if depth > MAX_DEPTH:
            raise Refused("nested too deep")
        tag = text[at]
        at += 1
        if tag == "N":
            return None, at
        if tag == "T":
            return True, at
        if tag == "F":
            return False, at
        if tag == "i":
            digits, at = number(text, at, ";")
            return int(digits, 16), at
        if tag == "f":
            digits, at = number(text, at, ";")
            return float.fromhex(digits), at
        if tag == "c":
            digits, at = number(text, at, ";")
            real, imag = digits.split(",")
            return complex(float.fromhex(real), float.fromhex(imag)), at
        count, at = number(text, at, ":")
        count = int(count)
        if count < 0:
            raise Refused("negative length")
        if tag == "s" or tag == "b":
            if at + count > length(text):
                raise Refused("truncated string")
            chunk = text[at : at + count]
            return (chunk if tag == "s" else chunk.encode("latin-1")), at + count
        if tag == "d":
            result = {}
            for _ in range(count):
                key, at = decode(text, at, depth + 1)
                result[key], at = decode(text, at, depth + 1)
            return result, at
        if tag not in ("l", "t", "S", "z"):
            raise Refused("unknown tag %r" % tag)
        items = []
        for _ in range(count):
            item, at = decode(text, at, depth + 1)
            items.append(item)
        return {"l": list, "t": tuple, "S": set, "z": frozenset}[tag](items), at

    def loads(data):
        try:
            text = data.decode("utf-8", "surrogatepass")
            value, end = decode(text, 0, 0)
        except Refused:
            raise
        except Exception as error:  # IndexError, ValueError, TypeError (unhashable key)
            raise Refused("malformed: %s: %s" % (type_of(error).__name__, error)) from None
        if end != length(text):
            raise Refused("trailing bytes")
        return value

    return dumps, loads


def as_plain(value, kind):
    """The standard library's containers as plain data (a ``Counter`` is a ``dict``).

    ``Counter``, ``OrderedDict``, ``defaultdict`` and ``deque`` by identity, and named
    tuples that keep ``tuple``'s comparisons; ``None`` for anything else. Whatever this
    returns is encoded as plain data, so nothing of the value's class crosses over.
    """
    found = sys.modules.get("collections")
    if found is not None:
        if kind in (found.Counter, found.OrderedDict, found.defaultdict):
            return dict(value)
        if kind is found.deque:
            return list(value)
    if (
        issubclass(kind, tuple)
        and hasattr(kind, "_fields")
        and all(getattr(kind, n) is getattr(tuple, n) for n in ("__eq__", "__ne__", "__hash__"))
    ):
        return tuple(value)
    return None


def make_frames(read, write):
    """Length-prefixed frames over pipes: 8 bytes little-endian size, then the bytes."""
    from_bytes = int.from_bytes

    def send(fd, payload):
        data = memoryview(len(payload).to_bytes(8, "little") + payload)
        while data:
            data = data[write(fd, data) :]

    def read_exactly(fd, size):
        chunks, left = [], size
        while left:
            chunk = read(fd, min(left, 1 << 20))
            if not chunk:
                return None
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def receive(fd):
        head = read_exactly(fd, 8)
        if head is None:
            return None
        return read_exactly(fd, from_bytes(head, "little"))

    return send, read_exactly, receive


def format_traceback(error, sources):
    """The traceback of ``error`` restricted to frames of the named sources."""
    out = ["Traceback (most recent call last):\n"]
    tb = error.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        lines = sources.get(code.co_filename)
        if lines is not None:
            out.append(
                '  File "%s", line %d, in %s\n' % (code.co_filename, tb.tb_lineno, code.co_name)
            )
            if 0 < tb.tb_lineno <= len(lines):
                out.append("    " + lines[tb.tb_lineno - 1].strip() + "\n")
        tb = tb.tb_next
    detail = str(error)
    out.append(type(error).__name__ + (": " + detail if detail else "") + "\n")
    return "".join(out)[-8000:]


def describe_refusal(value):
    """Why a result is not plain data, and whether that looks like a hack."""
    kind = type(value)
    for base in (str, bytes, int, float, complex, list, tuple, set, frozenset, dict):
        if issubclass(kind, base):
            return True, "a %s (a subclass of %s) in place of plain data" % (
                kind.__name__,
                base.__name__,
            )
    overridden = [
        name
        for name in ("__eq__", "__ne__", "__hash__", "__lt__", "__gt__", "__le__", "__ge__")
        if getattr(kind, name, None) is not getattr(object, name, None)
    ]
    if kind.__module__ == "solution" or overridden:
        what = ", ".join(overridden) or "its own methods"
        return True, "an object of its own class %s (overriding %s) in place of plain data" % (
            kind.__name__,
            what,
        )
    return False, "a %s, which is not plain data (%s)" % (kind.__name__, PLAIN)


def solution_process(program, entry_point, commands, answers):
    """The solution's side: load the program on request, then answer calls until EOF."""
    read, write, exit_now = os.read, os.write, os._exit
    dumps, loads = make_codec()
    send, _, receive = make_frames(read, write)
    system, flush_names = sys, ("stdout", "stderr")
    base_exception, exception = BaseException, Exception
    lines = program.splitlines()
    sources = {"solution.py": lines}

    def flush():
        for name in flush_names:
            try:
                getattr(system, name).flush()
            except BaseException:
                pass

    def answer(kind, *fields):
        flush()
        send(answers, dumps((kind, *fields)))

    def raised(error):
        try:
            detail = str(error)[:2000]
        except BaseException:
            detail = "<unprintable>"
        fatal = not isinstance(error, exception)
        answer("raised", type(error).__name__, detail, format_traceback(error, sources), fatal)

    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    target = None
    while True:
        message = receive(commands)
        if message is None:
            flush()
            exit_now(0)
        request = loads(message)
        if request[0] == "load":
            try:
                exec(compile(program, "solution.py", "exec"), namespace)
                target = namespace.get(entry_point)
                if target is None and isinstance(namespace.get("Solution"), type):
                    method = getattr(namespace["Solution"], entry_point, None)
                    target = (
                        None if method is None else getattr(namespace["Solution"](), entry_point)
                    )
            except base_exception as error:
                raised(error)
                continue
            if callable(target):
                answer("loaded")
            else:
                answer("missing", entry_point)
            continue
        _, args, kwargs = request
        try:
            result = target(*args, **kwargs)
        except base_exception as error:
            raised(error)
            continue
        try:
            payload = dumps(("ok", result))
        except Refused:
            hack, why = describe_refusal(result)
            answer("refused", hack, "the solution returned " + why)
            continue
        except RecursionError:
            answer("refused", False, "the solution returned data nested too deep")
            continue
        flush()
        send(answers, payload)


class SolutionError(Exception):
    """The solution raised an exception that is not a builtin one (its type is named)."""


class SolutionAborted(BaseException):
    """The solution process ended, or raised SystemExit/KeyboardInterrupt: tests stop."""


class Tampered(BaseException):
    """The solution answered with something that is not plain data, or a forged frame."""


def fork_untrusted(body, *args):
    """Fork a process for untrusted code; return (pid, fd to it, fd from it).

    In the child, before ``body(*args, 4, 5)`` runs: stdin is ``/dev/null``, fd 4 reads
    what the parent sends and fd 5 writes to it, and every other descriptor but stdout
    and stderr is closed, the report channel (fd 3) first of all.
    """
    down_read, down_write = os.pipe()
    up_read, up_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            os.dup2(down_read, 4)
            os.dup2(up_write, 5)
            os.closerange(6, 1 << 16)
            os.close(3)  # the report channel: never in the untrusted process
            sys.stdin = open(os.devnull)
            body(*args, 4, 5)
        finally:
            os._exit(125)
    os.close(down_read)
    os.close(up_write)
    return pid, down_write, up_read


def start_solution(program, entry_point):
    """Fork the solution process; return (pid, command fd, answer fd)."""
    return fork_untrusted(solution_process, program, entry_point)


class Solution:
    """The harness's handle on one solution process, and what it said."""

    def __init__(self, program, entry_point, codec, frames):
        self.pid, self.commands, self.answers = start_solution(program, entry_point)
        self.entry_point = entry_point
        self.dumps, self.loads = codec
        self.send, _, self.receive = frames
        self.calls = 0
        self.problem = None  # (verdict, type, message, traceback, hack) once it went wrong
        self.cpu_s = self.maxrss_kb = self.status = None

    def request(self, payload):
        """Send one encoded command and return the decoded answer (or raise)."""
        if self.problem is not None:  # it failed before: every later call fails too
            raise (Tampered if self.problem[0] == "tampered" else SolutionAborted)(self.problem[2])
        try:
            self.send(self.commands, payload)
        except OSError:
            pass  # its end is closed: the answer below is EOF
        data = self.receive(self.answers)
        if data is None:
            status = self.stop()
            how = (
                "killed by signal %d" % os.WTERMSIG(status)
                if os.WIFSIGNALED(status)
                else "exited with code %d" % os.WEXITSTATUS(status)
            )
            self.fail("error", "SolutionExited", "the solution's process ended (%s)" % how)
        try:
            answer = self.loads(data)
            kind = answer[0]
            if kind not in ANSWER_SIZES or len(answer) != ANSWER_SIZES[kind]:
                raise Refused("unknown answer %r" % (kind,))
        except (Refused, TypeError, IndexError, KeyError) as error:
            self.fail(
                "tampered",
                "Tampered",
                "malformed answer from the solution: %s" % error,
                hack="forged answer",
            )
        if kind == "raised":
            self.rebuild(answer)
        if kind == "refused":
            _, hack, why = answer
            self.fail(
                "tampered" if hack else "error",
                "UnsupportedResult",
                str(why),
                hack="non-plain result" if hack else None,
            )
        if kind == "missing":
            self.fail(
                "error",
                "NameError",
                "the solution defines no function or Solution method %r" % answer[1],
            )
        return answer

    def rebuild(self, answer):
        """Raise the solution's exception in the harness: a builtin one, or SolutionError."""
        _, name, detail, trace, _ = (str(field) for field in answer)
        if answer[4] is not False:  # SystemExit, KeyboardInterrupt...: the tests stop
            self.fail("error", name, detail, trace)
        found = BUILTINS.get(name)
        if isinstance(found, type) and issubclass(found, Exception):
            error = found(detail)
        else:
            error = SolutionError(name + ": " + detail)
        error.execgym_solution = (name, detail, trace)
        raise error

    def fail(self, verdict, name, message, trace="", hack=None):
        self.problem = (verdict, name, message, trace, hack)
        raise (Tampered if verdict == "tampered" else SolutionAborted)(message)

    def load(self):
        self.request(self.dumps(("load",)))

    def __call__(self, *args, **kwargs):
        self.calls += 1
        try:
            payload = self.dumps(("call", list(args), kwargs))
        except Refused as error:
            self.fail(
                "harness_error",
                "UnsupportedArgument",
                "the tests pass an argument that is not plain data (%s): %s" % (PLAIN, error),
            )
        return self.request(payload)[1]

    def stop(self):
        """Kill the process (all calls are done) and collect its CPU time and peak memory."""
        if self.status is not None:
            return self.status
        for fd in (self.commands, self.answers):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            os.kill(self.pid, 9)
        except OSError:
            pass
        _, status, usage = os.wait4(self.pid, 0)
        self.status = status
        self.cpu_s = usage.ru_utime + usage.ru_stime
        self.maxrss_kb = usage.ru_maxrss
        return status


ANSWER_SIZES = {"loaded": 1, "ok": 2, "raised": 5, "refused": 3, "missing": 2}
BUILTINS = dict(vars(__builtins__) if not isinstance(__builtins__, dict) else __builtins__)


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
        size = read_exactly(0, 10)
        return read_exactly(0, int(size)) if size else b""

    try:  # before the solution's process exists, so it never sees a dumpable parent
        import ctypes

        if ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")
        setup_error = None
    except Exception as error:
        setup_error = error

    entry_point, _, program = part().partition(b"\n")
    entry_point = entry_point.decode("utf-8")
    candidate = Solution(program.decode("utf-8", "replace"), entry_point, codec, frames)
    del program
    header, _, rest = part().partition(b"\n")
    nonce, mode, context_size, tests_size = header.split(b" ")
    context_size, tests_size = int(context_size), int(tests_size)
    context = rest[:context_size].decode("utf-8", "replace")
    tests = rest[context_size : context_size + tests_size].decode("utf-8", "replace")
    reference = rest[context_size + tests_size :].decode("utf-8", "replace")
    mode = mode.decode()
    del rest, header
    if setup_error is not None:
        report("harness_error", [("type", "HarnessError"), ("message", repr(setup_error))])
    dup2(open_fd(os.devnull, os.O_RDONLY), 0)
    system.stdin = open(os.devnull)

    source = context + "\n\n" + tests + "\n"
    sources = {"tests.py": source.splitlines()}
    code = compile(source, "tests.py", "exec")
    cases = [0, 0]

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
        if mode == "cases":
            namespace["__execgym_case__"] = run_case
        first_failure[0] = None
        cases[0] = cases[1] = 0
        try:
            solution.load()
            exec(code, namespace)
            proxy = _proxy(solution)
            namespace[entry_point] = proxy
            namespace["check"](proxy)
            if first_failure[0] is not None:
                raise first_failure[0]
            if solution.problem is not None:  # the tests swallowed it: still not a pass
                raise SolutionAborted(solution.problem[2])
        except BaseException as error:
            return outcome(solution, error)
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
        truth.stop()
        fields += [
            ("reference_verdict", verdict),
            ("reference_cpu_s", truth.cpu_s),
            ("reference_maxrss_kb", truth.maxrss_kb),
        ]
    verdict, more = run_tests(candidate)
    if reference:  # measured only when compared: killing and reaping costs about 1 ms
        candidate.stop()
    fields += more
    fields += [
        ("calls", candidate.calls),
        ("cpu_s", candidate.cpu_s),
        ("maxrss_kb", candidate.maxrss_kb),
    ]
    if mode == "cases":  # tests that never reached a case (the solution failed to load)
        total = cases[1] or 1
        fields += [("cases_passed", cases[0] if verdict != "passed" else total)]
        fields += [("cases_total", total)]
    report(verdict, fields)


def _proxy(solution):
    def candidate(*args, **kwargs):
        return solution(*args, **kwargs)

    candidate.__name__ = candidate.__qualname__ = solution.entry_point
    return candidate


main()
