"""The solution's process: the solution's side of the boundary, run INSIDE the sandbox.

A part of the assert and function-call harnesses (see :data:`execgym.guest.BUNDLES`):
the process :func:`execgym.guest.untrusted.fork_untrusted` forks before the harness
reads anything secret runs :func:`solution_process`, which loads the program and
serves the harness's requests (:func:`requests`) with answers of plain data
(:func:`make_answerer`); the pytest harness's proxy uses the same answerer.
"""

import os
import sys

from .boundary import OPERATIONS, CaseTimeout, as_plain_class, start_timer
from .plain_data import (
    ARGUMENT_DEPTH,
    BUILTINS,
    MAX_DEPTH,
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

    serve_in_forks = make_call_forks(commands, answers)  # bound before the solution runs
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
            if state["get_target"] is None and entry_point:
                answer("missing", entry_point)
            else:
                answer("loaded", found)
            if state["fresh"]:  # from now on, a fork of this process takes each request
                serve_in_forks(serve)
            continue
        serve(*request)


def make_call_forks(commands, answers):
    """``serve_in_forks(serve)``: fresh state, each request served by a fork of this process.

    Bound here, before the solution's code runs in this process, with everything it
    calls: the solution's module may replace ``os.fork``, ``os.read``, ``sys.stdout``
    or a builtin, install a signal handler, a trace or profile function, a ``gc``
    callback, an at-fork or an audit hook, or start a thread, and any of those running
    in this process between two calls would carry state from one call to the next (a
    handler counting ``SIGCHLD``, a hook counting forks: each passed ``assert f(2) ==
    4`` then ``assert f(2) == 5`` before). ``serve_in_forks`` first makes this process
    inert (:func:`make_inert`), then, for each request it reads on ``commands``, forks
    a copy of it with libc's own ``fork`` (:func:`raw_fork`: no at-fork hook runs and no
    audit event is raised, so a fork is invisible to the solution's code; Python's
    ``os.fork`` ran both, and reseeded ``random`` in each fork), which restores what
    was set aside, closes ``commands`` (later requests are not its to read), serves
    the request, answers the harness itself and says so with one byte on a pipe of its
    own. This process waits for it to end and forks the next one for the next request:
    one fork per request, made when the request arrives (one made ahead of each request
    had to be made for the end of the requests too: one more fork per rollout). A fork
    that ends without saying so (a crash, ``os._exit``, a signal) is answered
    ``("exited", how, signal)`` here. Never returns: at the harness's EOF it leaves.

    A fork's process is killed with its parent by the harness, which kills this
    process's group (:meth:`execgym.guest.untrusted.Solution.finish`).
    """
    import _signal
    import gc

    read, write, pipe, close, exit_now = os.read, os.write, os.pipe, os.close, os._exit
    signaled, stopped_by, exit_code = os.WIFSIGNALED, os.WTERMSIG, os.WEXITSTATUS
    send, _, receive = make_frames(read, write)
    dumps, loads = make_codec()
    fork, wait = raw_fork()
    inert = make_inert(_signal, gc, wait)

    def exited(status):
        if signaled(status):
            return "killed by signal %d" % stopped_by(status), stopped_by(status)
        return "exited with code %d" % exit_code(status), 0

    def serve_in_forks(serve):
        restore = inert()
        while True:
            message = receive(commands)
            if message is None:  # the harness is done
                exit_now(0)
            done_read, done_write = pipe()
            pid = fork()
            if pid == 0:
                try:
                    restore()
                    close(done_read)
                    close(commands)
                    serve(*loads(message))
                    write(done_write, b"!")
                finally:
                    exit_now(0)
            close(done_write)
            finished = read(done_read, 1) if pid > 0 else b""
            close(done_read)
            if pid < 0:
                send(answers, dumps(("exited", "could not fork (too many processes?)", 0)))
                continue
            status = wait(pid)
            if not finished:  # no flush(): sys.stdout may be the solution's own object
                send(answers, dumps(("exited", *exited(status))))

    return serve_in_forks


def make_inert(_signal, gc, wait):
    """``inert() -> restore``: make this process run no code of the solution's from now on.

    ``inert()`` blocks every signal (a handler of the solution's would run here at the
    next call of a Python function), turns the cyclic garbage collector off (its
    callbacks and finalizers; what exists is frozen, so that a collection in a fork
    copies no page for it), sets aside the trace and profile functions, and, if the
    solution left threads running, goes on in a fork of this process that has only
    this thread (Python's own fork, once, with every signal blocked; the process with
    the threads waits for it holding the GIL, so none of them runs again, and leaves
    with its status). ``restore()``, called first thing in each fork, puts back what
    was set aside, so a call sees the module as its import left it. Everything here is
    bound before the solution's code runs.
    """
    mask, block, set_mask = _signal.pthread_sigmask, _signal.SIG_BLOCK, _signal.SIG_SETMASK
    every_signal = _signal.valid_signals()
    collecting, collect_on, collect_off, freeze = gc.isenabled, gc.enable, gc.disable, gc.freeze
    get_trace, set_trace = sys.gettrace, sys.settrace
    get_profile, set_profile = sys.getprofile, sys.setprofile
    listdir, python_fork, exit_now = os.listdir, os.fork, os._exit
    signaled, stopped_by, exit_code = os.WIFSIGNALED, os.WTERMSIG, os.WEXITSTATUS
    length = len

    def alone():
        try:
            return length(listdir("/proc/self/task")) == 1
        except OSError:
            return False

    def inert():
        saved = mask(block, every_signal)
        was_collecting = collecting()
        collect_off()
        freeze()  # a collection in a fork would write to every object's page
        trace, profile = get_trace(), get_profile()
        if trace is not None:
            set_trace(None)
        if profile is not None:
            set_profile(None)
        if not alone():
            pid = python_fork()
            if pid != 0:
                status = wait(pid)
                exit_now(128 + stopped_by(status) if signaled(status) else exit_code(status))

        def restore():
            mask(set_mask, saved)
            if was_collecting:
                collect_on()
            if trace is not None:
                set_trace(trace)
            if profile is not None:
                set_profile(profile)

        return restore

    return inert


def raw_fork():
    """``(fork, wait)``: libc's ``fork()`` and ``waitpid()``, called with the GIL held.

    ``fork() -> pid`` (-1 if it failed) runs none of Python's at-fork hooks (nor
    CPython's own after-fork bookkeeping, which a process with one thread and no lock
    held does not need) and raises no audit event; ``wait(pid) -> status`` never lets
    another Python thread of this process run. Through :mod:`ctypes` (``PyDLL``: the
    GIL is kept); where it is missing, ``os.fork`` and ``os.waitpid``.
    """
    try:
        import ctypes

        fork = ctypes.PyDLL(None).fork
        waitpid, status = ctypes.PyDLL(None, use_errno=True).waitpid, ctypes.c_int()
        where, errno = ctypes.byref(status), ctypes.get_errno
    except BaseException:
        return os.fork, lambda pid: os.waitpid(pid, 0)[1]

    def wait(pid):
        while waitpid(pid, where, 0) < 0:
            if errno() != 4:  # EINTR: again; anything else: no such child to wait for
                return 0
        return status.value

    return fork, wait
