"""The solution's process and the harness's handle on it, run INSIDE the sandbox.

The harness forks the solution's process (:func:`fork_untrusted`) before it reads
anything secret (the nonce, the tests, the cases) and talks to it only through
:class:`Solution`: requests and answers are frames of plain data
(:mod:`execgym.guest.plain_data`, whose source precedes this one in every harness
script). :func:`solution_process` is the solution's side for the assert and
function-call harnesses; the pytest harness brings its own.
"""

import os
import sys

from .plain_data import (
    ARGUMENT_DEPTH,
    BUILTINS,
    MAX_DEPTH,
    PLAIN,
    PLAIN_TYPES,
    Refused,
    describe_refusal,
    format_traceback,
    make_codec,
    make_frames,
    offender,
)


def make_answerer(answers, sources, codec=None, allowed=None):
    """The solution side's replies: ``answer(kind, *fields)``, ``raised(error)``, ``reply(value)``.

    ``reply`` sends a result as plain data, or a refusal saying why it is not (and
    whether that looks like a hack; ``allowed(part)`` tells the parts that cross by
    value); ``raised`` sends an exception's name, message,
    traceback (frames of ``sources`` only) and whether it was fatal (not an
    ``Exception``). Output is flushed first, so it keeps its order with the answers.
    """
    dumps = (codec or make_codec())[0]
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

    def reply(result, changes=None, handle_ok=False):
        try:
            payload = dumps(("ok", result, changes))
        except Refused:
            hack, why = describe_refusal(offender(result, allowed))
            if handle_ok and not hack and type(result) not in PLAIN_TYPES:  # an opaque object
                answer("handle", type(result).__name__, truth(result), callable(result))
                return
            answer("refused", hack, "the solution returned " + why)
            return
        except RecursionError:
            answer("refused", False, "the solution returned data nested too deep")
            return
        flush()
        send(answers, payload)

    def truth(value):
        try:
            return bool(value)
        except BaseException:
            return True

    return answer, raised, reply, flush


def requests(commands, flush, loads=None):
    """Each request the harness sends on ``commands``, decoded; at EOF, flush and leave."""
    receive, exit_now = make_frames(os.read, os.write)[2], os._exit
    loads = loads or make_codec()[1]
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


class Pending:
    """A value of the tests' side that only the solution's process can build (decoded)."""

    __slots__ = ("payload", "tag")

    def __init__(self, tag, payload):
        self.tag, self.payload = tag, payload


def name_kind(value):
    """How a name of the solution's module crosses to the tests: its kind, its value."""
    if isinstance(value, type):
        return "class"
    if type(value).__name__ == "module":
        return "module:" + str(getattr(value, "__name__", ""))
    if callable(value):
        return "function"
    return "value"


def solution_process(program, entry_point, commands, answers):
    """The solution's side: load the program on request, then answer calls until EOF.

    Requests (plain data, see :class:`Solution`):

    - ``("load", fresh_instance, fresh_state, by_value, wanted)`` runs the program and
      finds the entry point (:func:`find_target`); the answer names the kinds of the
      module's names among ``wanted`` (``{name: (kind, value)}``). With
      ``fresh_state``, every later request is served by a fork of this process taken
      now, so each sees the module as freshly imported. ``by_value`` are the names of
      the tests' classes whose objects cross by value.
    - ``("call", job)`` calls the entry point, ``("eval", job)`` evaluates a recipe of
      the tests' side (a name of the module, a call, an attribute, an operation); the
      job is encoded separately (it may hold objects, functions of the tests and
      recipes) as ``(log, what, args, kwargs, limit_s)``: ``log`` are the tests'
      earlier changes to the solution's objects, replayed first where they were not
      applied yet. Under a ``SIGALRM`` timer of ``limit_s`` seconds when that is not 0.
      The answer carries the result and the new state of each argument the call
      changed in place (copied back by the tests' side).
    """
    base_exception, exception = BaseException, Exception
    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    by_value, memo = set(), {}
    sources = {"solution.py": program.splitlines()}

    def export(value):
        kind = type(value)
        attributes = getattr(value, "__dict__", None)
        if kind.__name__ in by_value and type(attributes) is dict and as_plain_class(kind):
            return ("O", kind.__name__, attributes)
        raise Refused(kind)

    def make_object(name):
        found = namespace.get(name)
        if not isinstance(found, type):
            found = namespace["__execgym_record__"] = type(name, (), {})
        return found.__new__(found)

    results_codec = make_codec(export, None, None, MAX_DEPTH + 3)
    jobs_codec = make_codec(None, Pending, make_object, ARGUMENT_DEPTH + 8)

    def crosses(part):
        return type(part).__name__ in by_value and as_plain_class(type(part))

    answer, raised, reply, flush = make_answerer(answers, sources, results_codec, crosses)
    state = {"get_target": None, "timer": None, "fresh": False}

    def build(value):
        """``value`` with every :class:`Pending` part built here (recipes evaluated)."""
        kind = type(value)
        if kind is Pending:
            return evaluate(value.tag, value.payload)
        if kind is list:
            return [build(item) for item in value]
        if kind is tuple:
            return tuple(build(item) for item in value)
        if kind is dict:
            return {build(key): build(item) for key, item in value.items()}
        if kind is set or kind is frozenset:
            return kind(build(item) for item in value)
        attributes = getattr(value, "__dict__", None)
        if kind.__name__ in by_value and type(attributes) is dict:
            for key, item in list(attributes.items()):
                if type(item) is Pending or type(item) in (list, tuple, dict):
                    attributes[key] = build(item)
        return value

    def evaluate(tag, payload):
        if tag == "B":  # a builtin (a type the tests pass: int, str...)
            return BUILTINS[payload]
        if tag == "M":
            import importlib

            return importlib.import_module(payload)
        if tag == "F":  # a function of the tests: their own code, run here
            import marshal
            import types

            code, name, defaults, cells, names = payload
            scope = {"__name__": "tests", "__builtins__": __builtins__}
            scope["__execgym_asserted__"] = lambda: True  # the tests count their asserts
            scope.update(build(names))
            closure = tuple(types.CellType(build(cell)) for cell in cells) or None
            function = types.FunctionType(marshal.loads(code), scope, name, None, closure)
            function.__defaults__ = build(defaults)
            return function
        if tag != "R":
            raise Refused("unknown extension %r" % (tag,))
        return recipe(payload)

    def recipe(step):
        what = step[0]
        if what == "name":
            if step[1] not in namespace:
                raise NameError("name %r is not defined by the solution" % step[1])
            return namespace[step[1]]
        if what == "target":
            return state["get_target"]()
        if what == "get":  # targets are recipes; arguments are values (which may hold some)
            return getattr(recipe(step[1]), step[2])
        if what == "op":
            return OPERATIONS[step[1]](recipe(step[2]), *build(step[3]))
        if what == "call":
            key = step[1]
            if key in memo:
                return memo[key]
            result = recipe(step[2])(*build(step[3]), **build(step[4]))
            memo[key] = result
            return result
        if what == "setattr":
            if step[1] not in memo:
                memo[step[1]] = None
                setattr(recipe(step[2]), step[3], build(step[4]))
            return None
        raise Refused("unknown recipe %r" % (what,))

    def replay(log):
        for step in log:  # what the tests did to the solution's objects, in order
            if step[1] in memo:
                continue
            try:
                recipe(step)
            except exception:  # it raised when the tests did it, too
                memo[step[1]] = None

    def serve(kind, job):
        """Do one call or evaluation and answer it."""
        try:
            log, what, args, kwargs, limit_s, names = jobs_codec[1](job)
            by_value.update(names)
            replay(log)
            args, kwargs = build(args), build(kwargs)
            target = state["get_target"]() if kind == "call" else None
            before = snapshot(args, kwargs)
        except Refused as error:
            answer("refused", False, "the tests' arguments could not be rebuilt: %s" % error)
            return
        except base_exception as error:
            raised(error)
            return
        if limit_s and state["timer"] is None:
            state["timer"] = start_timer()
        timer = state["timer"]
        try:
            try:
                if limit_s:
                    timer(limit_s)
                result = target(*args, **kwargs) if target is not None else recipe(what)
            finally:
                if limit_s:
                    timer(0)
        except CaseTimeout:
            answer("timeout")
            return
        except base_exception as error:
            raised(error)
            return
        reply(result, changed(before, args, kwargs), True)

    def snapshot(args, kwargs):
        """The encoded state of each argument a call could change in place."""
        states = {}
        for key, value in [*enumerate(args), *kwargs.items()]:
            if type(value) in (int, float, str, bytes, bool, type(None), complex):
                continue
            try:
                states[key] = results_codec[0](value)
            except BaseException:
                continue
        return states

    def changed(before, args, kwargs):
        if not before:
            return None
        values = {**dict(enumerate(args)), **kwargs}
        after = snapshot([], {k: values[k] for k in before})
        return [[k, values[k]] for k in before if after.get(k) != before[k]] or None

    orphan_kill = parent_death_signal()
    for request in requests(commands, flush):
        if request[0] == "load":
            _, fresh_instance, fresh_state, names, wanted = request
            by_value.update(names)
            try:
                exec(compile(program, "solution.py", "exec"), namespace)
                state["get_target"] = find_target(namespace, entry_point, fresh_instance)
                found = {}
                for name in wanted:
                    if name in namespace and not name.startswith("__execgym"):
                        kind = name_kind(namespace[name])
                        value = namespace[name] if kind == "value" else None
                        try:
                            results_codec[0](value)
                        except BaseException:
                            kind, value = "object", None
                        found[name] = (kind, value)
            except base_exception as error:
                raised(error)
                continue
            state["fresh"] = fresh_state
            if fresh_state:
                import gc

                gc.freeze()  # forks then copy no page for the collector's sake
            if state["get_target"] is None and entry_point:
                answer("missing", entry_point)
            else:
                answer("loaded", found)
            if state["fresh"]:  # from now on, a fork of this process takes each request
                serve_in_forks(serve, commands, answer, flush, orphan_kill)
            continue
        serve(*request)


def serve_in_forks(serve, commands, answer, flush, orphan_kill):
    """Serve every later request in a fork of this (loaded) process, one fork each.

    Each fork is made ahead of its request and reads it from ``commands`` itself, so the
    fork's cost is not on the harness's path; it closes ``commands`` (later requests are
    not its to read, nor a child's of it), answers the harness itself, and then writes
    one byte on a pipe of its own to say so. This process then kills it (it has nothing
    more to do: a forged early answer gains nothing), reaps it and makes the next. A
    fork that ends without saying so (a crash, ``os._exit``, a signal) is answered
    ``("exited", how, signal)`` here. Never returns: at the harness's EOF it leaves.
    """
    receive, loads = make_frames(os.read, os.write)[2], make_codec()[1]
    while True:
        flush()
        done_read, done_write = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(done_read)
                orphan_kill()
                message = receive(commands)
                if message is None:  # the harness is done
                    os.write(done_write, b"E")
                    os._exit(0)
                os.close(commands)
                serve(*loads(message))
                os.write(done_write, b"!")
            finally:
                os._exit(0)
        os.close(done_write)
        try:
            finished = os.read(done_read, 1)
        finally:
            os.close(done_read)
        if finished == b"!":
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        _, status = os.waitpid(pid, 0)
        if finished == b"E":
            os._exit(0)
        if finished:
            continue
        if os.WIFSIGNALED(status):
            answer("exited", "killed by signal %d" % os.WTERMSIG(status), os.WTERMSIG(status))
        else:
            answer("exited", "exited with code %d" % os.WEXITSTATUS(status), 0)


def parent_death_signal():
    """``kill()``, for a fork of the solution: SIGKILL it when its parent dies.

    The harness kills the solution's process past a call's time limit; the fork serving
    the call must not outlive it. Bound once, called in each fork.
    """
    found = sys.modules.get("ctypes")
    if found is None:
        return lambda: None
    try:
        prctl = found.CDLL(None).prctl
    except BaseException:
        return lambda: None

    def kill():
        try:
            prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
        except BaseException:
            pass

    return kill


def as_plain_class(kind):
    """Whether objects of ``kind`` may cross by value (they have no ``__slots__``)."""
    return "__slots__" not in vars(kind)


OPERATIONS = {
    "len": len,
    "bool": bool,
    "str": str,
    "repr": repr,
    "int": int,
    "float": float,
    "list": list,
    "getitem": lambda value, key: value[key],
    "contains": lambda value, item: item in value,
}
"""Builtin operations the tests apply to an object of the solution (by name)."""


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

        At EOF on its commands the process leaves by itself: with fresh state, after the
        fork it made ahead for the next request has read that EOF and left too. Waiting
        for that (about a millisecond) makes the run's process count the same every
        time (the harness, this process and each fork it made: one per request, plus
        that last one); killing it at once, or leaving it to the run's end, counted the
        last fork only if it won the race. A process still there after ``wait_s``
        seconds (its code held it up) is killed. Returns the ``wait4`` resource usage;
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
            try:
                os.kill(self.pid, 9)
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


def patch(original, new):
    """Make ``original`` (the tests' argument) hold ``new`` (its state after the call).

    Lists, dicts, sets and objects crossing by value are changed in place, recursively
    where both sides hold the same kind of container, so the tests' other references to
    the same objects see the change too; anything else cannot change in place.
    """
    kind = type(original)
    if kind is not type(new):
        return new
    if kind is list:
        original[:] = [
            patch(old, item) if index < len(original) else item
            for index, (old, item) in enumerate(
                zip(original + [None] * len(new), new, strict=False)
            )
        ]
    elif kind is dict:
        merged = {
            key: patch(original[key], item) if key in original else item
            for key, item in new.items()
        }
        original.clear()
        original.update(merged)
    elif kind is set:
        original.clear()
        original.update(new)
    elif getattr(original, "__dict__", None) is not None and kind.__module__ == "tests":
        state = {
            key: patch(original.__dict__[key], item) if key in original.__dict__ else item
            for key, item in vars(new).items()
        }
        original.__dict__.clear()
        original.__dict__.update(state)
    else:
        return new
    return original


def recipe_root(recipe):
    """The object a recipe starts from: ``("id", n)`` for one a call made, or a name."""
    while True:
        what = recipe[0]
        if what == "get":
            recipe = recipe[1]
        elif what == "op" or (what == "call" and recipe[2][0] == "get"):
            recipe = recipe[2]
        elif what == "call":
            return ("id", recipe[1])
        else:
            return tuple(recipe)


def collect(value, roots, seen):
    """Add the roots of the recipes in ``value`` (and in those recipes) to ``roots``."""
    stack = [value]
    while stack:
        value = stack.pop()
        kind = type(value)
        if kind is Remote:
            value = value._recipe
            kind = tuple
            roots.add(recipe_root(value))
        if kind in (list, tuple, set, frozenset):
            if id(value) not in seen:
                seen.add(id(value))
                stack.extend(value)
        elif kind is dict:
            if id(value) not in seen:
                seen.add(id(value))
                stack.extend(value.values())
        elif (
            kind.__module__ == "tests"
            and type(getattr(value, "__dict__", None)) is dict
            and id(value) not in seen
        ):
            seen.add(id(value))
            stack.extend(value.__dict__.values())


def is_standard_module(name):
    """Whether ``name`` is a module of the standard library (never a file of the rollout)."""
    top = name.partition(".")[0]
    return top in getattr(sys, "stdlib_module_names", ()) or top in sys.builtin_module_names


class Remote:
    """The tests' stand-in for a name, object or call result of the solution's module.

    It holds a recipe (``("name", n)``, ``("call", id, target, args, kwargs)``, ``("get",
    target, attribute)``, ``("op", name, target, args)``, ``("target",)``) that the
    solution's process evaluates, so it works when every call is served by a fresh fork
    too: an object the tests made (``Solution()``, ``Pair(1, 2)``) is rebuilt there from
    its recipe, and what the tests did to it since (attributes set, methods called) is
    replayed from the log, in order. Calling a class is lazy (nothing runs until the
    object is used); calling anything else, reading an attribute and the builtin
    operations ask the solution at once and give plain data back, or another
    :class:`Remote`. Equality and hashing are by identity, so no ``__eq__`` of the
    solution ever decides a comparison of the tests.
    """

    __slots__ = ("_callable", "_kind", "_recipe", "_solution", "_truth")
    __hash__ = object.__hash__

    def __init__(self, solution, recipe, kind="object", truth=True, is_callable=True):
        for name, value in (
            ("_solution", solution),
            ("_recipe", recipe),
            ("_kind", kind),
            ("_truth", truth),
            ("_callable", is_callable),
        ):
            object.__setattr__(self, name, value)

    def __call__(self, *args, **kwargs):
        __tracebackhide__ = True
        solution = self._solution
        step = ("call", next(solution.ids), self._recipe, list(args), kwargs)
        if self._kind == "class":  # built where it is used
            return Remote(solution, step, "instance")
        result = solution.evaluate(step)
        if self._recipe[0] == "get":  # a method: what it did to its object is replayed
            solution.log.append(step)
        return result

    def __getattr__(self, name):
        __tracebackhide__ = True
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self._solution.evaluate(("get", self._recipe, name))

    def __setattr__(self, name, value):
        solution = self._solution
        solution.log.append(("setattr", next(solution.ids), self._recipe, name, value))

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return self is not other

    def __bool__(self):
        return bool(self._truth)

    def __repr__(self):
        return "<%s of the solution>" % self._kind

    def _op(self, name, *args):
        __tracebackhide__ = True
        return self._solution.evaluate(("op", name, self._recipe, list(args)))

    def __len__(self):
        return self._op("len")

    def __iter__(self):
        return iter(self._op("list"))

    def __getitem__(self, key):
        return self._op("getitem", key)

    def __contains__(self, item):
        return self._op("contains", item)

    def __str__(self):
        return self._op("str")

    def __int__(self):
        return self._op("int")

    def __float__(self):
        return self._op("float")


CONTROL_FLOW = (StopIteration, StopAsyncIteration)
"""Exceptions the solution raises that cross as :class:`SolutionError` (they would steer
the tests' loops)."""

ANSWER_SIZES = {
    "loaded": (1, 2),
    "ok": (2, 3),
    "raised": (5,),
    "refused": (3,),
    "missing": (2,),
    "timeout": (1,),
    "handle": (4,),
    "exited": (3,),
}
