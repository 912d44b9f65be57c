"""Plain data across a process boundary: the code both harnesses run INSIDE the sandbox.

The assert and function-call harnesses (:mod:`execgym.judges._assert_runner`,
:mod:`execgym.judges._call_runner`) and the pytest harness's proxy mode are this module's
source followed by their own (see :func:`execgym.judges._programs.harness_program`): the
harness forks the solution's process (:func:`fork_untrusted`) before it reads anything
secret, and talks to it only through :class:`Solution`, with length-prefixed frames of
plain data (:func:`make_codec`: ``None``, ``bool``, ``int``, ``float``, ``complex``,
``str``, ``bytes``, ``list``, ``tuple``, ``set``, ``frozenset``, ``dict``; exact types,
at most 100 levels deep). Whatever it receives is decoded into fresh builtin objects, so
no method of the solution ever runs in the harness.

Standard library only, and importable on the host too (execgym encodes jobs with the
same codec); importing it has no side effect.
"""

import os
import sys

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


def make_answerer(answers, sources):
    """The solution side's replies: ``answer(kind, *fields)``, ``raised(error)``, ``reply(value)``.

    ``reply`` sends a result as plain data, or a refusal saying why it is not (and
    whether that looks like a hack); ``raised`` sends an exception's name, message,
    traceback (frames of ``sources`` only) and whether it was fatal (not an
    ``Exception``). Output is flushed first, so it keeps its order with the answers.
    """
    dumps, _ = make_codec()
    send = make_frames(os.read, os.write)[0]
    system, flush_names, exception, text = sys, ("stdout", "stderr"), Exception, str

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
            detail = text(error)[:2000]
        except BaseException:
            detail = "<unprintable>"
        fatal = not isinstance(error, exception)
        answer("raised", type(error).__name__, detail, format_traceback(error, sources), fatal)

    def reply(result):
        try:
            payload = dumps(("ok", result))
        except Refused:
            hack, why = describe_refusal(result)
            answer("refused", hack, "the solution returned " + why)
            return
        except RecursionError:
            answer("refused", False, "the solution returned data nested too deep")
            return
        flush()
        send(answers, payload)

    return answer, raised, reply, flush


def find_target(namespace, name, fresh):
    """A function returning what to call for ``name`` in the solution's ``namespace``.

    ``name`` is a top-level function, else a method of ``class Solution``;
    ``"Class.method"`` names a class's method. With ``fresh``, each call gets a new
    instance of the class (LeetCode style); otherwise one instance serves every call.
    ``None`` when there is no such callable.
    """
    owner, _, method = name.rpartition(".")
    target = namespace.get(method) if not owner else None
    if callable(target) and not isinstance(target, type):
        return lambda: target
    holder = namespace.get(owner or "Solution")
    if isinstance(holder, type) and callable(getattr(holder, method, None)):
        if fresh:
            return lambda: getattr(holder(), method)
        bound = getattr(holder(), method)
        return lambda: bound
    if callable(target):
        return lambda: target
    return None


class CaseTimeout(BaseException):
    """One call ran past its time limit (raised by SIGALRM in the solution's process)."""


def solution_process(program, entry_point, commands, answers):
    """The solution's side: load the program on request, then answer calls until EOF.

    Requests: ``("load", fresh)`` runs the program and finds the entry point (see
    :func:`find_target`); ``("call", args, kwargs, limit_s)`` calls it, under a
    ``SIGALRM`` timer of ``limit_s`` seconds when that is not 0.
    """
    exit_now, loads = os._exit, make_codec()[1]
    receive = make_frames(os.read, os.write)[2]
    base_exception = BaseException
    answer, raised, reply, flush = make_answerer(answers, {"solution.py": program.splitlines()})
    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    get_target, timer = None, None
    while True:
        message = receive(commands)
        if message is None:
            flush()
            exit_now(0)
        request = loads(message)
        if request[0] == "load":
            try:
                exec(compile(program, "solution.py", "exec"), namespace)
                get_target = find_target(namespace, entry_point, request[1])
            except base_exception as error:
                raised(error)
                continue
            if get_target is None:
                answer("missing", entry_point)
            else:
                answer("loaded")
            continue
        _, args, kwargs, limit_s = request
        if limit_s and timer is None:
            timer = start_timer()
        try:
            try:
                if limit_s:
                    timer(limit_s)
                result = get_target()(*args, **kwargs)
            finally:
                if limit_s:
                    timer(0)
        except CaseTimeout:
            answer("timeout")
            continue
        except base_exception as error:
            raised(error)
            continue
        reply(result)


def start_timer():
    """Install the ``SIGALRM`` handler; return ``set(seconds)`` (0 cancels)."""
    import signal

    def on_alarm(signum, frame):
        raise CaseTimeout()

    signal.signal(signal.SIGALRM, on_alarm)
    set_timer, real = signal.setitimer, signal.ITIMER_REAL
    return lambda seconds: set_timer(real, seconds)


class SolutionError(Exception):
    """The solution raised an exception that is not a builtin one (its type is named)."""


class SolutionAborted(BaseException):
    """The solution process ended, or raised SystemExit/KeyboardInterrupt: tests stop."""


class Tampered(BaseException):
    """The solution answered with something that is not plain data, or a forged frame."""


def make_non_dumpable():
    """``prctl(PR_SET_DUMPABLE, 0)``: ``None``, or the error to report (before any fork)."""
    try:
        import ctypes

        if ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")
    except Exception as error:
        return error
    return None


def read_part(read_exactly):
    """One part of a job on stdin: 10 digits of length, then that many bytes."""
    size = read_exactly(0, 10)
    return read_exactly(0, int(size)) if size else b""


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


class Solution:
    """The harness's handle on one solution process, and what it said.

    ``body(*body_args, commands_fd, answers_fd)`` is the process's code (by default
    :func:`solution_process` on ``program`` and ``entry_point``). Once a call went wrong
    for good (the process died, a forged answer, a hack), :attr:`problem` holds
    ``(verdict, type, message, traceback, hack)`` and every later request fails too.
    """

    def __init__(self, program, entry_point, codec, frames, body=None, body_args=None):
        if body is None:
            body, body_args = solution_process, (program, entry_point)
        self.pid, self.commands, self.answers = fork_untrusted(body, *body_args)
        self.entry_point = entry_point
        self.dumps, self.loads = codec
        self.send, _, self.receive = frames
        self.calls = 0
        self.errors = {}  # exception classes by name, beside the builtin ones, for rebuild
        self.problem = None  # (verdict, type, message, traceback, hack) once it went wrong
        self.cpu_s = self.maxrss_kb = self.status = None

    def request(self, payload, wait_s=0):
        """Send one encoded command and return the decoded answer (or raise).

        With ``wait_s``, a process that has not answered within that many seconds is
        killed and the request fails with verdict ``timeout`` (the backstop of a
        per-call limit the solution might have disarmed).
        """
        __tracebackhide__ = True  # pytest (proxy mode) leaves these frames out of reports
        if self.problem is not None:  # it failed before: every later call fails too
            raise (Tampered if self.problem[0] == "tampered" else SolutionAborted)(self.problem[2])
        try:
            self.send(self.commands, payload)
        except OSError:
            pass  # its end is closed: the answer below is EOF
        if wait_s and not self.ready(wait_s):
            self.stop()
            self.fail("timeout", "CaseTimeout", "no answer within %.3g s: killed" % wait_s)
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
        if kind == "timeout":
            raise CaseTimeout()
        if kind == "missing":
            self.fail(
                "error",
                "NameError",
                "the solution defines no function or Solution method %r" % answer[1],
            )
        return answer

    def rebuild(self, answer):
        """Raise the solution's exception in the harness: a builtin one, or SolutionError."""
        __tracebackhide__ = True
        _, name, detail, trace, _ = (str(field) for field in answer)
        if answer[4] is not False:  # SystemExit, KeyboardInterrupt...: the tests stop
            self.fail("error", name, detail, trace)
        found = self.errors.get(name) or BUILTINS.get(name)
        if isinstance(found, type) and issubclass(found, Exception):
            error = found(detail)
        else:
            error = SolutionError(name + ": " + detail)
        error.execgym_solution = (name, detail, trace)
        raise error

    def fail(self, verdict, name, message, trace="", hack=None):
        __tracebackhide__ = True
        self.problem = (verdict, name, message, trace, hack)
        raise (Tampered if verdict == "tampered" else SolutionAborted)(message)

    def ready(self, wait_s):
        """Whether an answer (or EOF) arrives within ``wait_s`` seconds."""
        import select

        return bool(select.select([self.answers], [], [], wait_s)[0])

    def load(self, fresh=False):
        """Run the program and find the entry point (``fresh``: an instance per call)."""
        self.request(self.dumps(("load", fresh)))

    def call(self, args, kwargs, limit_s=0):
        """Call the entry point; with ``limit_s``, raise ``CaseTimeout`` past that time."""
        self.calls += 1
        try:
            payload = self.dumps(("call", list(args), kwargs, limit_s))
        except Refused as error:
            self.fail(
                "harness_error",
                "UnsupportedArgument",
                "the tests pass an argument that is not plain data (%s): %s" % (PLAIN, error),
            )
        return self.request(payload, limit_s + 0.5 if limit_s else 0)[1]

    def __call__(self, *args, **kwargs):
        return self.call(args, kwargs)

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


ANSWER_SIZES = {"loaded": 1, "ok": 2, "raised": 5, "refused": 3, "missing": 2, "timeout": 1}
BUILTINS = dict(vars(__builtins__) if not isinstance(__builtins__, dict) else __builtins__)
