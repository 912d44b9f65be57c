# ruff: noqa: F821 - run after execgym.judges._plain_data, whose names it uses
"""The solution's process and the harness's handle on it, run INSIDE the sandbox.

The harness forks the solution's process (:func:`fork_untrusted`) before it reads
anything secret (the nonce, the tests, the cases) and talks to it only through
:class:`Solution`: requests and answers are frames of plain data
(:mod:`execgym.judges._plain_data`, whose source precedes this one in every harness
script). :func:`solution_process` is the solution's side for the assert and
function-call harnesses; the pytest harness brings its own.
"""

import os
import sys


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


def requests(commands, flush):
    """Each request the harness sends on ``commands``, decoded; at EOF, flush and leave."""
    receive, loads, exit_now = make_frames(os.read, os.write)[2], make_codec()[1], os._exit
    while True:
        message = receive(commands)
        if message is None:
            flush()
            exit_now(0)
        yield loads(message)


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
    base_exception = BaseException
    answer, raised, reply, flush = make_answerer(answers, {"solution.py": program.splitlines()})
    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    get_target, timer = None, None
    for request in requests(commands, flush):
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
            if os.WIFSIGNALED(status) and os.WTERMSIG(status) == 24:  # SIGXCPU: RLIMIT_CPU
                self.fail("timeout", "CPULimit", "the solution used up its CPU time (SIGXCPU)")
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
