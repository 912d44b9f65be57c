"""The harness's handle on the solution's process, run INSIDE the sandbox.

The harness forks the solution's process (:func:`fork_untrusted`) before it reads
anything secret (the nonce, the tests, the cases) and talks to it only through
:class:`Solution`: requests and answers are frames of plain data
(:mod:`execgym.guest.plain_data`), stand-ins and recipes (:mod:`.boundary`).
:func:`.solution_side.solution_process` is the solution's side for the assert and
function-call harnesses; the pytest harness brings its own.
"""

import os
import sys

from .boundary import (
    ANSWER_SIZES,
    CONTROL_FLOW,
    CaseTimeout,
    Remote,
    SolutionAborted,
    SolutionError,
    Tampered,
    as_plain_class,
    collect,
    is_standard_module,
    patch,
    recipe_root,
)
from .plain_data import (
    ARGUMENT_DEPTH,
    BUILTINS,
    MAX_DEPTH,
    PLAIN,
    Refused,
    make_codec,
)
from .solution_side import solution_process


def make_non_dumpable():
    """``prctl(PR_SET_DUMPABLE, 0)``: ``None``, or the error to report (before any fork).

    The harness also becomes a child subreaper (``PR_SET_CHILD_SUBREAPER``), so every
    process a solution starts and leaves behind is reparented to it when its parent
    dies, and :meth:`Solution.stop` can charge its CPU time and memory to the solution
    (:func:`reap_orphans`); in the warm pool the harness is its run's PID 1 already.
    """
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
        if prctl(4, 0, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")
        if os.getpid() != 1 and prctl(36, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER, 1) failed")
    except Exception as error:
        return error
    return None


END_WAIT_S = 1.0
"""How long a solution's process may take to leave at EOF once all calls are done
(:meth:`Solution.finish`; about a millisecond unless its code holds it up), in seconds."""

LIVE_SOLUTIONS = set()
"""The pids of the solution processes not yet stopped (never reaped as orphans)."""


def reap_orphans():
    """Kill and reap every child of the harness that is no live solution process.

    Those are what a stopped solution left behind: children it never reaped (zombies)
    and descendants still running, all reparented to the harness (a subreaper, or PID
    1). Killing one reparents its own children in turn, so this repeats until none is
    left. Returns (CPU seconds, peak memory in KiB) of them all: CPU time summed, and
    peaks summed too, as if they peaked together (an upper bound), from ``wait4``.
    """
    me, cpu, peak = str(os.getpid()), 0.0, 0
    for _ in range(1000):
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in LIVE_SOLUTIONS:
                continue
            try:
                with open("/proc/" + entry + "/stat", "rb") as handle:
                    fields = handle.read().rpartition(b")")[2].split()
            except OSError:
                continue
            if len(fields) > 1 and fields[1].decode() == me:
                found.append(int(entry))
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        for pid in found:
            try:
                _, _, usage = os.wait4(pid, 0)
            except ChildProcessError:
                continue
            cpu += usage.ru_utime + usage.ru_stime
            peak += usage.ru_maxrss
    return cpu, peak


def read_part(read_exactly):
    """One part of a job on stdin: 10 digits of length, then that many bytes."""
    size = read_exactly(0, 10)
    return read_exactly(0, int(size)) if size else b""


def fork_untrusted(body, *args):
    """Fork a process for untrusted code; return (pid, fd to it, fd from it).

    In the child, before ``body(*args, 4, 5)`` runs: it leads a process group of its
    own (so :meth:`Solution.finish` kills it with every process it forked, each call's
    fork with fresh state first of all), stdin is ``/dev/null``, fd 4 reads what the
    parent sends and fd 5 writes to it, and every other descriptor but stdout and
    stderr is closed, the report channel (fd 3) first of all.
    """
    down_read, down_write = os.pipe()
    up_read, up_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            try:
                os.setpgid(0, 0)
            except OSError:
                pass  # then the process alone is killed, and the rest reaped (stop)
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

    Values of the tests that are not plain data cross as extensions of the codec
    (:meth:`export`): a builtin type by name (``int``), a standard-library module by
    name, a function the tests define (its marshalled code, run in the solution's
    process as the tests' code), an object of a class the tests' context defines (by
    value: ``ListNode``, ``TreeNode``), and a :class:`Remote` (a name, object or call of
    the solution, by its recipe). Objects of the context's classes come back by value,
    as objects of the context's class (no method of the solution's class crosses).
    """

    def __init__(self, program, entry_point, codec, frames, body=None, body_args=None):
        if body is None:
            body, body_args = solution_process, (program, entry_point)
        self.pid, self.commands, self.answers = fork_untrusted(body, *body_args)
        LIVE_SOLUTIONS.add(self.pid)
        self.entry_point = entry_point
        self.dumps, self.loads = codec
        self.send, _, self.receive = frames
        self.calls = 0
        self.errors = {}  # exception classes by name, beside the builtin ones, for rebuild
        self.problem = None  # (verdict, type, message, traceback, hack) once it went wrong
        self.cpu_s = self.maxrss_kb = self.status = None
        self.namespace = {}  # the tests' names: classes crossing by value, functions
        self.log = []  # what the tests did to the solution's objects, in order
        self._by_value = (-1, [])
        self.ids = iter(range(1 << 62))
        self.jobs = make_codec(self.export, None, None, ARGUMENT_DEPTH)[0]
        self.results = make_codec(None, None, self.make_object, MAX_DEPTH + 3)[1]

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
            if os.WIFSIGNALED(status):
                self.ended("killed by signal %d" % os.WTERMSIG(status), os.WTERMSIG(status))
            self.ended("exited with code %d" % os.WEXITSTATUS(status), 0)
        try:
            answer = self.results(data) if data[:1] == b"G" else self.loads(data)
            kind = answer[0]
            if kind not in ANSWER_SIZES or len(answer) not in ANSWER_SIZES[kind]:
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
        if kind == "exited":
            self.ended(str(answer[1]), answer[2])
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

    def ended(self, how, signal):
        """The solution's process (or the fork serving a call) ended without answering."""
        __tracebackhide__ = True
        if signal == 24:  # SIGXCPU: RLIMIT_CPU
            self.fail("timeout", "CPULimit", "the solution used up its CPU time (SIGXCPU)")
        self.fail("error", "SolutionExited", "the solution's process ended (%s)" % how)

    def rebuild(self, answer):
        """Raise the solution's exception in the harness: a builtin one, or SolutionError.

        Exceptions that steer control flow on the tests' side (``StopIteration`` ends a
        ``map`` or a generator silently, so ``all(map(candidate, ...))`` would pass)
        become a :class:`SolutionError`, which steers nothing.
        """
        __tracebackhide__ = True
        _, name, detail, trace, _ = (str(field) for field in answer)
        if answer[4] is not False:  # SystemExit, KeyboardInterrupt...: the tests stop
            self.fail("error", name, detail, trace)
        found = self.errors.get(name) or BUILTINS.get(name)
        if (
            isinstance(found, type)
            and issubclass(found, Exception)
            and not issubclass(found, CONTROL_FLOW)
        ):
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

    def load(self, fresh=False, fresh_state=False, namespace=None, wanted=()):
        """Run the program and find the entry point (``fresh``: an instance per call).

        ``fresh_state``: each later call is served by a fork of the loaded process.
        ``namespace``: the tests' names (their classes cross by value); ``wanted``: the
        names the tests use, answered ``{name: (kind, value)}`` where the solution's
        module defines them.
        """
        self.namespace = namespace if namespace is not None else {}
        answer = self.request(
            self.dumps(("load", fresh, fresh_state, self.by_value(), list(wanted)))
        )
        return answer[1] if len(answer) > 1 else {}

    def by_value(self):
        """The names of the tests' classes whose objects cross by value."""
        if self._by_value[0] != len(self.namespace):
            self._by_value = (
                len(self.namespace),
                [
                    name
                    for name, value in self.namespace.items()
                    if isinstance(value, type)
                    and value.__module__ == "tests"
                    and as_plain_class(value)
                ],
            )
        return self._by_value[1]

    def export(self, value):
        """How a value of the tests that is not plain data crosses (see the class)."""
        kind = type(value)
        if kind is Remote:
            return ("R", value._recipe)
        recipe = getattr(value, "__execgym_recipe__", None)
        if recipe is not None and kind.__name__ == "function":
            return ("R", recipe)
        if isinstance(value, type) and BUILTINS.get(value.__name__) is value:
            return ("B", value.__name__)
        if kind.__name__ == "module" and is_standard_module(getattr(value, "__name__", "")):
            return ("M", value.__name__)
        if kind.__name__ == "function" and value.__code__.co_filename == "tests.py":
            return ("F", self.function(value))
        attributes = getattr(value, "__dict__", None)
        if (
            kind.__module__ == "tests"
            and self.namespace.get(kind.__name__) is kind
            and type(attributes) is dict
            and as_plain_class(kind)
        ):
            return ("O", kind.__name__, attributes)
        raise Refused(kind)

    def function(self, value):
        """A function of the tests as data: code, name, defaults, closure, globals used."""
        import marshal

        names, codes = set(), [value.__code__]
        while codes:
            code = codes.pop()
            names.update(code.co_names)
            codes.extend(c for c in code.co_consts if type(c) is type(code))
        scope = value.__globals__
        used = {}
        for name in names:
            if name in scope and not name.startswith("__"):
                try:
                    self.jobs(scope[name])
                except (Refused, RecursionError, TypeError):
                    continue  # not needed to run, or not to be had there
                used[name] = scope[name]
        cells = [cell.cell_contents for cell in value.__closure__ or ()]
        return (marshal.dumps(value.__code__), value.__name__, value.__defaults__, cells, used)

    def make_object(self, name):
        """An empty object of the tests' class ``name`` (a result crossing by value)."""
        found = self.namespace.get(name)
        if not isinstance(found, type) or found.__module__ != "tests" or not as_plain_class(found):
            raise Refused("an object of %r, which the tests do not define" % name)
        return object.__new__(found)

    def job(self, kind, what, args, kwargs, limit_s):
        """Encode one call or evaluation; arguments that cannot cross are the task's fault."""
        __tracebackhide__ = True
        try:
            log = self.relevant(what, args, kwargs) if self.log else []
            job = self.jobs((log, what, list(args), kwargs, limit_s, self.by_value()))
        except (Refused, RecursionError) as error:
            self.fail(
                "task_error",
                "UnsupportedArgument",
                "the tests pass an argument that cannot reach the solution's process "
                "(plain data: %s; functions and classes of the tests; the solution's own "
                "names): %s" % (PLAIN, error),
            )
        return self.dumps((kind, job))

    def relevant(self, what, args, kwargs):
        """The steps of the log that touch the objects this job uses, in order."""
        roots, seen = set(), set()
        if what is not None:
            roots.add(recipe_root(what))
        collect((what, args, kwargs), roots, seen)
        chosen, grown = set(), True
        while grown:
            grown = False
            for index, step in enumerate(self.log):
                if index not in chosen and recipe_root(step[2]) in roots:
                    chosen.add(index)
                    collect(step[3:], roots, seen)
                    grown = True
        return [step for index, step in enumerate(self.log) if index in chosen]

    def call(self, args, kwargs, limit_s=0):
        """Call the entry point; with ``limit_s``, raise ``CaseTimeout`` past that time."""
        __tracebackhide__ = True
        self.calls += 1
        payload = self.job("call", None, args, kwargs, limit_s)
        answer = self.request(payload, limit_s + 0.5 if limit_s else 0)
        return self.outcome(
            answer, ("call", next(self.ids), ("target",), list(args), kwargs), args, kwargs
        )

    def evaluate(self, recipe):
        """Evaluate a recipe (a name, attribute, call, operation) in the solution's process."""
        __tracebackhide__ = True
        self.calls += 1
        answer = self.request(self.job("eval", recipe, (), {}, 0))
        return self.outcome(answer, recipe, recipe[3] if recipe[0] == "call" else (), {})

    def outcome(self, answer, recipe, args, kwargs):
        if answer[0] == "handle":
            return Remote(self, recipe, answer[1], answer[2], answer[3])
        changes = answer[2] if len(answer) > 2 else None
        if changes:
            where = {**dict(enumerate(args)), **kwargs}
            for key, value in changes:
                if key in where:
                    patch(where[key], value)
        return answer[1]

    def __call__(self, *args, **kwargs):
        return self.call(args, kwargs)

    def stop(self, wait_s=0):
        """End the process (all calls are done) and collect its CPU time and peak memory.

        ``wait_s``: end it as :meth:`finish` does (it leaves at EOF); by default it is
        killed at once (a call that timed out, a process that died). Its figures are
        those of its whole process tree: its own (with the children it reaped), plus
        every process it left behind (:func:`reap_orphans`), so work done in a child it
        never waits for is charged to it too.
        """
        if self.status is not None:
            return self.status
        usage = self.finish(wait_s)
        left_cpu_s, left_maxrss_kb = reap_orphans()
        self.cpu_s = usage.ru_utime + usage.ru_stime + left_cpu_s
        self.maxrss_kb = usage.ru_maxrss + left_maxrss_kb
        return self.status

    def finish(self, wait_s=0):
        """Close the pipes, let the process leave within ``wait_s`` s, else kill; reap it.

        At EOF on its commands the process leaves by itself (with fresh state, each
        call's fork has ended by then). Waiting for that (about a millisecond) makes the
        run's process count the same every time (the harness, this process and, with
        fresh state, one fork per request). A process still there after ``wait_s``
        seconds (its code held it up) is killed, with its process group (a fork serving
        a call when the call timed out, and whatever it started that stayed in the
        group; what left it is reaped by :meth:`stop`). Returns the ``wait4`` resource usage;
        :attr:`status` is set (``None`` if it was set before: nothing is done).
        """
        if self.status is not None:
            return None
        for fd in (self.commands, self.answers):
            try:
                os.close(fd)
            except OSError:
                pass
        if wait_s and not self.exits_within(wait_s):
            wait_s = 0
        if not wait_s:
            for kill in (os.killpg, os.kill):  # its group: the fork serving a call too
                try:
                    kill(self.pid, 9)
                except OSError:
                    pass
        _, self.status, usage = os.wait4(self.pid, 0)
        LIVE_SOLUTIONS.discard(self.pid)
        return usage

    def exits_within(self, wait_s):
        """Whether the process ends within ``wait_s`` seconds (it is not reaped here).

        ``False`` where that cannot be watched (no ``pidfd_open``): it is killed then.
        """
        import select

        try:
            handle = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            return False
        try:
            return bool(select.select([handle], [], [], wait_s)[0])
        finally:
            os.close(handle)
