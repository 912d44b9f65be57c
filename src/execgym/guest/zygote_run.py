"""One run of the warm pool, from its PID 1 down to the program; standard library only.

A part of the zygote bundle (see :mod:`execgym.guest.zygote`; runs INSIDE the pool's
bwrap sandbox): the child the zygote forks for a run (its PID 1, :func:`init_process`,
or a staged one, :func:`staged_init`), how that child becomes the program
(:func:`become_program`), and how PID 1 reports the run's end (:class:`RunEnd`).
"""

import _signal
import array
import builtins
import ctypes
import fcntl
import functools
import gc
import json
import linecache
import marshal
import mmap
import os
import resource
import signal
import socket
import sys

from .zygote_world import (
    CLONE_NEWNET,
    PR_SET_NO_NEW_PRIVS,
    PROGRAMS,
    check,
    libc,
    load_seccomp,
    network_is_clean,
    open_io,
    prepare_world,
    read_all,
    set_environ,
    trim_heap,
    wchar,
    write_files,
)


class RunEnd:
    """How a run's PID 1 reports the run's end to the zygote, before PID 1 itself exits.

    A page shared with that PID 1 only (the program's processes close it before any
    untrusted code runs) holds seven 8-byte integers, -1 until set: processes started,
    bytes written, the wait status, CPU microseconds and peak resident kilobytes (the
    run's PID 1 and everything it reaped, as ``wait4`` would give), then ``DONE`` once
    the others are final, then 1 if the reused network namespace it was given held
    sockets (the zygote then drops it; see :class:`NetworkNamespaces`). One byte on a
    pipe then wakes the zygote, which reports the run at once: the exit of PID 1, which
    tears the run's namespaces down (about 0.6 ms here), no longer delays the result.
    PID 1 writes the page only after every other process of the namespace is killed
    and reaped, so nothing of the run is left running by then. A run whose PID 1 dies
    first (killed) is reported when reaped.
    """

    DONE = 0x45584547594D  # "EXEGYM"

    def __init__(self):
        self.page = mmap.mmap(-1, 56)
        self.page[0:56] = b"\xff" * 56
        self.wake, self.notify = os.pipe()  # the zygote reads, PID 1 writes

    def in_zygote(self):
        """After the clone: the zygote keeps only the page and the reading end."""
        os.close(self.notify)
        self.notify = -1

    def in_run(self):
        """After the clone, in the run's PID 1: only the page and the writing end.

        The writing end moves to 10 or above, clear of the descriptors a program gets
        on 0-3 (``dup2`` there would close it) and of those its harness forks with.
        """
        os.close(self.wake)
        self.wake = -1
        moved = fcntl.fcntl(self.notify, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(self.notify)
        self.notify = moved

    def close(self):
        """Drop both (another run's, or in a process that must not report)."""
        self.page.close()
        for fd in (self.wake, self.notify):
            if fd >= 0:
                os.close(fd)
        self.wake = self.notify = -1

    def field(self, index):
        return int.from_bytes(self.page[8 * index : 8 * index + 8], "little", signed=True)

    def set_field(self, index, value):
        self.page[8 * index : 8 * index + 8] = int(value).to_bytes(8, "little", signed=True)

    def finish(self, exit_code):
        """As PID 1, once the run is counted: its status and usage, then the wake-up."""
        own = resource.getrusage(resource.RUSAGE_SELF)
        reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_s = own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime
        self.set_field(2, (exit_code & 0xFF) << 8)
        self.set_field(3, round(cpu_s * 1e6))
        self.set_field(4, max(own.ru_maxrss, reaped.ru_maxrss))
        self.set_field(5, self.DONE)
        try:
            os.write(self.notify, b"!")
        except OSError:
            pass  # the zygote is gone: nobody to tell

    def finished(self):
        return self.field(5) == self.DONE


def count_run(end, io, is_program):
    """As the run's PID 1, as the run ends: what it started and wrote, into ``end``.

    Every other process of the namespace is killed and reaped first: a reaped process's
    writes join its reaper's ``wchar`` (the kernel's own reaping, when PID 1 exits,
    would drop them). PIDs of a new namespace are handed out in order from 1, so the
    last one is the number of processes and threads it ever had (unless more than
    ``pid_max`` did). ``is_program``: PID 1 is the run's program itself (a preloaded
    harness), so it and its own writes count; else it is only the init.
    """
    try:
        os.kill(-1, signal.SIGKILL)  # from PID 1: every other process of the namespace
    except OSError:
        pass  # ESRCH: none is left
    while True:
        try:
            os.waitpid(-1, 0)
        except OSError:  # ChildProcessError: all reaped
            break
    try:
        with open("/proc/sys/kernel/ns_last_pid", "rb") as handle:
            started = int(handle.read()) - (0 if is_program else 1)
        written = -1
        if io is not None:  # a program's own writes count, not its set-up's
            written = wchar(io[0]) - (io[2] if is_program else wchar(io[1]))
        end.set_field(0, started)
        end.set_field(1, written)
    except (OSError, ValueError):
        pass  # the page keeps -1: the run reports null, as for a run killed first


def counting_exit(end, io):
    """``os._exit`` for a preloaded harness as PID 1: count the run, report, then exit."""
    real_exit = os._exit

    def exit_now(code):
        if os.getpid() == 1:
            count_run(end, io, True)
            end.finish(code)
        real_exit(code)

    return exit_now


def become_program(header, fds, seccomp, end):
    """PID 2 of the run: take the run's descriptors, drop everything, run the script.

    A preloaded harness runs here as PID 1 instead: it keeps ``end`` (its :class:`RunEnd`;
    its forks close it at once) and counts and reports the run when it exits.
    """
    os.chdir("/work")
    stdin, stdout, stderr, report, files, script = fds
    code, entry = PROGRAMS.get(header.get("program"), (None, None))
    as_init = code is not None
    if as_init:  # the solution processes it forks get neither the page nor the ignore
        os.register_at_fork(after_in_child=end.close)
        # Every fork runs this, each call's fork of the solution too: the C function,
        # not signal.signal (see the docstring of zygote_world: 70 page faults each).
        os.register_at_fork(
            after_in_child=functools.partial(
                _signal.signal, _signal.SIGINT, _signal.default_int_handler
            )
        )
    else:
        end.close()
        _signal.signal(_signal.SIGINT, _signal.default_int_handler)  # ignored in PID 1
    io = None
    failed = None
    if code is None:
        code, failed = compile_script(read_all(script))
    for number, fd in enumerate((stdin, stdout, stderr)):
        os.dup2(fd, number)
    if report >= 0:
        os.dup2(report, 3)
    if header["uid"] is not None:
        os.chown("/work", header["uid"], header["uid"])
    write_files(files)
    first = 4 if report >= 0 else 3  # fd 3 may hold a namespace otherwise
    if as_init:  # it keeps only the way to report the run's end (not under 4: see serve)
        os.closerange(first, end.notify)
        os.closerange(end.notify + 1, 65536)
        io = open_io()
        os._exit = counting_exit(end, io)  # the harnesses leave with os._exit
    else:
        os.closerange(first, 65536)
    for kind, soft, hard in header["rlimits"]:
        resource.setrlimit(kind, (soft, hard))
    # The bounding set is empty already: the zygote dropped it once (drop_bounding_set).
    if header["uid"] is not None:
        os.setgroups([])
        os.setresgid(header["uid"], header["uid"], header["uid"])
        os.setresuid(header["uid"], header["uid"], header["uid"])
    else:  # a user namespace: stay uid 0 inside it, with no capability at all
        header_v3 = (ctypes.c_uint32 * 2)(0x20080522, 0)
        check(libc.capset(header_v3, (ctypes.c_uint32 * 6)()), "capset")
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    load_seccomp(seccomp)
    random = sys.modules.get("random")  # not preloaded: a run's own import seeds it
    if random is not None:
        random.seed()
    set_environ(header["env"])
    sys.argv = ["runner.py"]
    sys.stdin = open(0, encoding="utf-8", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
    namespace = {"__name__": "__main__", "__file__": "/work/runner.py", "__builtins__": builtins}
    try:
        if failed is not None:
            raise failed
        if entry is None:
            exec(code, namespace)
        else:
            code[entry]()  # defined ahead, in the zygote
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException as error:
        report_uncaught(error)
        code = 1
    if entry is None:
        finish_like_python()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(code)


def finish_like_python():
    """What ``python script.py`` does once the script has ended, before it exits.

    It waits for the threads that are not daemons and runs the ``atexit`` functions
    (``Py_FinalizeEx``); without this a pooled run ended as its main thread did, so a
    program that works in threads stopped at once (found when the warm pool joined the
    hostile corpus: eight CPU-burning threads ended with the run, unseen). An exception
    there is printed, as Python does, and does not change the exit code.
    """
    try:
        threading = sys.modules.get("threading")
        if threading is not None:
            threading._shutdown()
        atexit = sys.modules.get("atexit")
        if atexit is not None:
            atexit._run_exitfuncs()
    except BaseException as error:
        report_uncaught(error)


SCRIPT = "/work/runner.py"


def compile_script(data):
    """``(code, None)`` for a script's bytes, or ``(None, error)`` if it does not compile.

    It is compiled from bytes, as ``python runner.py`` reads a file (a PEP 263 coding
    line holds; other bytes than UTF-8 are a ``SyntaxError``). The error (or the
    ``ValueError`` of a NUL byte, before Python 3.12) is raised only once the program's
    stderr is in place, so the program's author sees it. The source goes into
    ``linecache`` under the script's path, so tracebacks show its lines although no
    file holds it.
    """
    try:
        code = compile(data, SCRIPT, "exec")
    except (SyntaxError, ValueError) as error:
        return None, error.with_traceback(None)  # its frames are ours
    lines = data.decode("utf-8", errors="replace").splitlines(True)
    linecache.cache[SCRIPT] = (len(data), None, lines, SCRIPT)
    return code, None


def report_uncaught(error):
    """Print an uncaught exception as Python does, from the program's frames on.

    The first frame (:func:`become_program`, ours) is left out. The traceback module,
    not the C default hook, prints it when the hook is the default: only it reads
    ``linecache``, so only it shows the lines of a script that is not a file.
    """
    error = error.with_traceback(error.__traceback__.tb_next if error.__traceback__ else None)
    if sys.excepthook is sys.__excepthook__:
        import traceback

        traceback.print_exception(error)
    else:
        sys.excepthook(type(error), error, error.__traceback__)


def preload(header, fd):
    """Load a trusted program the host sent (see :mod:`execgym.sandbox._trusted`).

    With an ``entry``, the code holds only definitions: they are executed here, once, in
    a namespace of their own, and each run calls ``entry``. A program that fails to
    load is left out: its runs then run the script they carry.
    """
    try:
        code = marshal.loads(read_all(fd))
        if header.get("entry") is None:
            PROGRAMS[header["preload"]] = (code, None)
        else:
            namespace = {
                "__name__": "__main__",
                "__file__": "/work/runner.py",
                "__builtins__": builtins,
            }
            exec(code, namespace)
            PROGRAMS[header["preload"]] = (namespace, header["entry"])
    except Exception as error:
        os.write(2, f"execgym zygote: could not preload a program: {error!r}\n".encode())
    finally:
        os.close(fd)
    trim_heap()
    gc.freeze()  # what it defined is never scanned by a run's collector either


def join_cgroups(paths):
    """Move this process into each cgroup whose ``cgroup.procs`` is in ``paths``.

    With ``os.open``/``os.write``, not ``open()``: a text file's layers of objects,
    made in each fresh fork, cost about three times the kernel's own work here.
    """
    for path in paths:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)


def receive(sock):
    """One message and the descriptors that came with it."""
    fds = array.array("i")
    message, ancillary, _, _ = sock.recvmsg(1 << 18, socket.CMSG_SPACE(16 * 4))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    return message, list(fds)


def slots_of(header, fds):
    slots = [-1] * 6
    for position, fd in zip(header["slots"], fds, strict=True):
        slots[position] = fd
    return slots


def staged_init(cgroup_procs, sock, seccomp, end):
    """A run's PID 1 made ahead of its run: it joins its cgroup, then waits for the job.

    Moving a process into a memory cgroup sleeps for several milliseconds on some
    kernels (cgroup v1 here: about 11 ms of waiting, under 1 ms of CPU), so the host
    keeps a few of these ready and the wait is off the path of every run. The job
    (header and descriptors, plus the reused network namespace for network "none")
    arrives on ``sock``; the init has no program and no untrusted code until then.
    """
    try:
        join_cgroups(cgroup_procs)
        message, fds = receive(sock)
        sock.close()
    except BaseException as error:
        os.write(2, f"execgym zygote: staging failed: {error!r}\n".encode())
        os._exit(125)
    if not message:
        os._exit(0)  # the pool closed, or dropped this slot
    header = json.loads(message)
    network = fds.pop() if header["network"] == "none" else "new"
    init_process(header, slots_of(header, fds), seccomp[header["network"]], network, end, True)


def init_process(header, fds, seccomp, network, end, attached=False):
    """PID 1 of the run's namespaces: set up, start the program, reap until it ends.

    Exits with the program's exit code, or 128 + N if signal N killed it; when it
    exits, the kernel kills every process left in the namespace.
    """
    try:
        # A program of the same uid may signal its PID 1; Python would turn SIGINT into
        # KeyboardInterrupt here. Other signals have no handler, so the kernel drops them.
        _signal.signal(_signal.SIGINT, _signal.SIG_IGN)
        if not attached:
            join_cgroups(header["cgroup_procs"])
        os.setsid()
        if network == "new":
            check(libc.unshare(CLONE_NEWNET), "unshare net")
        elif network is not None:
            check(libc.setns(network, CLONE_NEWNET), "setns")
            if not network_is_clean():  # a run before left sockets in it: never reuse it
                end.set_field(6, 1)
                check(libc.unshare(CLONE_NEWNET), "unshare net")
        prepare_world(header)
        if header.get("program") in PROGRAMS:
            # execgym's own harness, loaded ahead: it is trusted code, so it runs as this
            # PID 1 itself (it waits for the processes it starts; when it exits, the
            # kernel kills the rest of the namespace), which saves a fork per run.
            try:
                become_program(header, fds, seccomp, end)
            except BaseException as error:
                os.write(2, f"execgym zygote: setup failed: {error!r}\n".encode())
            os._exit(125)
        program = os.fork()
        if program == 0:
            try:
                become_program(header, fds, seccomp, end)
            except BaseException as error:
                os.write(2, f"execgym zygote: setup failed: {error!r}\n".encode())
            os._exit(125)
        for fd in fds:
            if fd >= 0:
                os.close(fd)
        while True:  # reap orphans too, as an init must
            pid, status = os.waitpid(-1, 0)
            if pid == program:
                break
        count_run(end, open_io(), False)
        code = 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        end.finish(code)
        os._exit(code)
    except BaseException as error:
        os.write(2, f"execgym zygote: init failed: {error!r}\n".encode())
        os._exit(125)
