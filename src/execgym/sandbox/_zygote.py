"""The fork server of the warm pool. Runs INSIDE a bwrap sandbox; trusted code only.

It starts once, imports the modules rollouts commonly use, then serves runs over a Unix
SEQPACKET socket on fd 3: each request is a JSON header plus descriptors (stdin,
stdout, stderr, report, a files archive, the script). For each run it forks a child
that, before any untrusted code exists in it:

1. joins the run's cgroups (writing ``0`` to ``cgroup.procs``: "this process");
2. enters fresh mount, PID, network, IPC and UTS namespaces as PID 1 of the new PID
   namespace, mounts the run's file system, then forks the program and waits for it,
   reaping orphans (so killing it kills the whole run). A trusted program the host
   preloaded (``{"preload": key}`` with its marshalled code; a judge's harness, see
   :mod:`execgym.sandbox._trusted`) runs as PID 1 itself, with no separate init;
   the run's file system is a private tmpfs on /work and /tmp, a fresh /proc and a
   devpts of its own on /dev/pts, with the cgroup files hidden;
3. in the program: writes the run's files, puts the descriptors on 0-3 and closes
   every other one (the control socket included), applies the rlimits, drops to
   the uid the zygote gave the run (as root, one no other live run has, from the
   pool's leased block; see :class:`RunUids`; in a user namespace it drops every
   capability instead), sets ``no_new_privs``,
   loads the seccomp filter, reseeds ``random``, and only then runs the script (or the
   preloaded code it names).

The host may stage a run's init ahead of its job with ``{"stage": slot, "cgroup_procs":
[...]}``: the child is cloned and joins its cgroups (step 1, which sleeps for milliseconds
on some kernels) while earlier runs execute, then waits, with no job and no untrusted
code, until a job naming ``"staged": slot`` arrives; it then goes on from step 2.

The zygote itself never reads a job's contents (they stay in the passed descriptors),
so no rollout can find another's program, tests or nonce in memory it inherits. The
pool prepends :mod:`execgym.sandbox._proctree` (``tree_cpu_time_s``) to this source. It
reports ``{"began": id, "at": t}`` once a run is forked (or handed to its staged init:
the host's clocks start then, not while the job waits in the queue; ``t`` is
``time.monotonic()`` here, which times the run), and ``{"run": id, "status": wait
status, "cpu_s": seconds, "maxrss_kb": kb, "at": t}`` when
a run ends (``{"run": id, "error": why}`` if it could not be forked), and kills a
run's process on ``{"kill": id}``. With the end it reports ``"processes"``, what the run
started, and ``"written"``, the bytes the run's processes wrote: its PID 1 kills and
reaps what is left, then counts the PID namespace's PIDs and reads its own ``wchar``
(which includes every process it reaped) into a page of memory shared with the zygote
only (the program's processes close it before any untrusted code runs); ``None`` for a
run killed before that. The same page carries the run's status and usage, so the run is
reported as soon as PID 1 has written it, while PID 1's own exit (the teardown of the
run's namespaces) goes on in parallel (see :class:`RunEnd`).
"""

import array
import builtins
import ctypes
import fcntl
import gc
import json
import linecache
import marshal
import mmap
import os
import resource
import select
import signal
import socket
import sys
import time

PRELOADED = (
    "abc", "bisect", "collections", "copy", "dataclasses", "decimal", "enum", "fractions",
    "functools", "hashlib", "heapq", "itertools", "math", "operator", "random", "re",
    "statistics", "string", "sys", "typing",
)  # fmt: skip

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 0x4000, 1 << 18
MS_RDONLY, MS_REMOUNT, MS_BIND = 1, 32, 4096
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, PR_CAPBSET_DROP = 1, 38, 22, 24
SECCOMP_MODE_FILTER = 2
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1

POLL_S = 0.05  # how often runs with no cgroup have their CPU time and memory sampled
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # the unit of CPU times in /proc/<pid>/stat
NAMESPACES = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
SYS_CLONE = {"x86_64": 56, "aarch64": 220}
PROGRAMS = {}  # key -> (code, None) or (namespace, entry): trusted programs preloaded

libc = ctypes.CDLL(None, use_errno=True)
python_libc = ctypes.PyDLL(None, use_errno=True)  # keeps the GIL across the call: for clone
python = ctypes.pythonapi


def check(result, what):
    if result < 0:
        error = ctypes.get_errno()
        raise OSError(error, what + ": " + os.strerror(error))
    return result


class SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


def load_seccomp(program):
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(len(program) // 8, ctypes.addressof(buffer))
    check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "seccomp")


def mount(source, target, fstype, flags, data):
    check(
        libc.mount(
            source.encode(),
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        "mount " + target,
    )


def loopback_up():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        import struct

        request = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH14s", fcntl.ioctl(probe, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(probe, SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | IFF_UP, b""))


def read_all(fd):
    """The whole content of an in-memory file passed by the host."""
    return os.pread(fd, os.fstat(fd).st_size, 0) if fd >= 0 else b""


def write_files(fd):
    data = read_all(fd)
    offset = 0
    while offset < len(data):
        name_size = int.from_bytes(data[offset : offset + 4], "little")
        name = data[offset + 4 : offset + 4 + name_size].decode("utf-8")
        offset += 4 + name_size
        size = int.from_bytes(data[offset : offset + 8], "little")
        content = data[offset + 8 : offset + 8 + size]
        offset += 8 + size
        parent = os.path.dirname(name)
        if parent:
            os.makedirs(parent, exist_ok=True)
            os.chmod(parent, 0o777)
        with open(name, "wb") as handle:
            handle.write(content)
        os.chmod(name, 0o666)


class NetworkNamespaces:
    """Network namespaces for runs with network "none", reused one run at a time, if clean.

    Making and tearing down a network namespace costs a few milliseconds of kernel time,
    the largest part of a pooled run's overhead. A run with network "none" can open only
    Unix sockets (seccomp) and its loopback stays down, so all it can leave in its
    namespace is Unix sockets; they close when its processes die, except those a run
    keeps in flight in an ``SCM_RIGHTS`` cycle until the kernel's garbage collector
    finds them (often not before the next run: issue 18, abstract names such as
    ``"\0name-<pid>"`` then stayed bound, and every run's PIDs are the same). So the next
    run's PID 1, once in a reused namespace, reads its ``/proc/net/unix`` (see
    :func:`network_is_clean`): any socket left in it, and the run takes a fresh
    namespace instead and the zygote drops the old one. Runs with network "loopback"
    always get a fresh one.
    """

    def __init__(self):
        self.home = os.open("/proc/self/ns/net", os.O_RDONLY)
        self.free = []

    def take(self):
        if self.free:
            return self.free.pop()
        check(libc.unshare(CLONE_NEWNET), "unshare net")
        try:
            return os.open("/proc/self/ns/net", os.O_RDONLY)
        finally:
            check(libc.setns(self.home, CLONE_NEWNET), "setns home")

    def give(self, fd):
        self.free.append(fd)


def network_is_clean():
    """Whether this process's network namespace holds no socket at all.

    ``/proc/self/net/unix`` lists every Unix socket of the namespace (bound or not,
    abstract names included) after one header line; a run with network "none" can make
    no other kind (seccomp).
    """
    with open("/proc/self/net/unix", "rb") as table:
        return len(table.read(4096).splitlines()) <= 1


class RunUids:
    """The host uids the zygote's runs get (as root): one no other live run holds.

    The host leases a block ``[first, first + size)`` for the pool (see
    :mod:`execgym.sandbox._uids`); ``size`` 0 means none (every run keeps the uid of its
    job header). Handed out round robin, so a uid is reused as late as possible; if all
    are held, the least held one is shared.
    """

    def __init__(self, first, size):
        self.first, self.size = first, size
        self.next = 0
        self.held = {}  # uid -> runs holding it
        self.of_pid = {}  # PID 1 of a run -> its uid

    def take(self, pid):
        if not self.size:
            return None
        for _ in range(self.size):
            uid = self.first + self.next
            self.next = (self.next + 1) % self.size
            if uid not in self.held:
                break
        else:
            uid = min(self.held, key=self.held.__getitem__)
        self.held[uid] = self.held.get(uid, 0) + 1
        self.of_pid[pid] = uid
        return uid

    def give(self, pid):
        """PID 1 ``pid`` was reaped: every process of its run is gone."""
        uid = self.of_pid.pop(pid, None)
        if uid is not None:
            self.held[uid] -= 1
            if not self.held[uid]:
                del self.held[uid]


def clone_into_namespaces(flags):
    """fork(), but the child starts in new namespaces: it is PID 1 of a new PID namespace.

    A raw clone(2) with the interpreter's own fork hooks around it, as os.fork() does;
    the zygote is single-threaded, so this is as safe as os.fork() there.
    """
    python.PyOS_BeforeFork()
    pid = python_libc.syscall(SYS_CLONE[os.uname().machine], flags | signal.SIGCHLD, 0, 0, 0, 0)
    if pid == 0:
        python.PyOS_AfterFork_Child()
        return 0
    python.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(ctypes.get_errno(), "clone: " + os.strerror(ctypes.get_errno()))
    return pid


def remount_read_only(path):
    """Make the mount at ``path`` read-only in this run's mount namespace only.

    The zygote's root and /dev are shared by every run it forks; read-only, nothing a
    run writes there (as uid 0 of a user namespace, say) can reach a later run or grow
    past the disk limit. The mount's other flags are kept: a user namespace may not drop
    them.
    """
    kept = os.statvfs(path).f_flag & (MS_NOSUID | MS_NODEV | MS_NOEXEC | 1024 | 2048 | 4096)
    mount("none", path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | kept, None)


def prepare_world(header):
    """As the run's PID 1, with the zygote's capabilities: the run's own file system."""
    mount("none", "/", None, MS_REC | MS_PRIVATE, None)
    remount_read_only("/")
    remount_read_only("/dev")
    # A devpts of the run's own: the zygote's (bwrap's) is shared by every run, and runs
    # reached each other's ptys there. /dev/ptmx is bwrap's link to pts/ptmx.
    pts = "newinstance,ptmxmode=0666,mode=620"
    mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, pts)
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    size = str(header["disk_bytes"])
    mount("tmpfs", "/work", "tmpfs", MS_NOSUID | MS_NODEV, "size=" + size + ",mode=0777")
    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=" + size + ",mode=1777")
    mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=" + size + ",mode=1777")
    if os.path.isdir("/run/execgym-cgroup"):  # the cgroup files stay out of reach
        for name in os.listdir("/run/execgym-cgroup"):
            path = ("/run/execgym-cgroup/" + name).encode()
            check(libc.umount2(path, MNT_DETACH), "umount cgroup " + name)
    if header["network"] == "loopback":
        loopback_up()


def open_io():
    """This process's I/O figures, whole and main thread's, opened while it may.

    Once it has dropped to another uid or is not dumpable, it could no longer open them;
    a descriptor opened before still reads its own, current figures. The third item is
    its own ``wchar`` so far (its set-up's writes, such as joining its cgroups).
    """
    try:
        whole = os.open("/proc/self/io", os.O_RDONLY)
        own = os.open("/proc/thread-self/io", os.O_RDONLY)
        return whole, own, wchar(own)
    except (OSError, ValueError):
        return None


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


def wchar(fd):
    for line in os.pread(fd, 4096, 0).splitlines():
        if line.startswith(b"wchar:"):
            return int(line.split()[1])
    raise ValueError("no wchar")


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
        os.register_at_fork(
            after_in_child=lambda: signal.signal(signal.SIGINT, signal.default_int_handler)
        )
    else:
        end.close()
        signal.signal(signal.SIGINT, signal.default_int_handler)  # ignored in PID 1
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
    for cap in range(64):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    if header["uid"] is not None:
        os.setgroups([])
        os.setresgid(header["uid"], header["uid"], header["uid"])
        os.setresuid(header["uid"], header["uid"], header["uid"])
    else:  # a user namespace: stay uid 0 inside it, with no capability at all
        header_v3 = (ctypes.c_uint32 * 2)(0x20080522, 0)
        check(libc.capset(header_v3, (ctypes.c_uint32 * 6)()), "capset")
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    load_seccomp(seccomp)
    import random

    random.seed()
    os.environ.clear()
    os.environ.update(header["env"])
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
    gc.freeze()  # what it defined is never scanned by a run's collector either


def join_cgroups(paths):
    for path in paths:
        with open(path, "w") as handle:
            handle.write("0")


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
        signal.signal(signal.SIGINT, signal.SIG_IGN)
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


def serve():
    for name in PRELOADED:
        __import__(name)
    # Several descriptors per run in flight (its end-report pipe, a network namespace):
    # hundreds of runs at once pass an ordinary user's soft limit of 1024. Each run's
    # program gets its own limit (max_open_files) anyway.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (OSError, ValueError):
        pass  # keep the soft limit: past it, a run fails alone (EMFILE), not the pool
    gc.freeze()
    control = socket.socket(fileno=int(sys.argv[-1]))
    control.setblocking(True)
    seccomp = {}
    runs = {}  # pid -> (run id or None while staged, reused network namespace or None)
    ends = {}  # pid -> the RunEnd its PID 1 reports the run's end through
    staged = {}  # slot id -> (pid of a staged init, socket to send it its job)
    networks = NetworkNamespaces()
    uids = RunUids(int(sys.argv[-3]), int(sys.argv[-2]))
    killed_cpu = {}  # pid -> CPU seconds its tree had used when we killed it
    polled = {}  # pid -> [cpu limit, memory limit, peak bytes, why killed] (no cgroup)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    control.send(
        json.dumps({"ready": os.getpid(), "cache_tag": sys.implementation.cache_tag}).encode()
    )
    while True:
        timeout_ms = POLL_S * 1000 if polled else None
        waking = {end.wake: pid for pid, end in ends.items() if end.wake >= 0}
        poller = select.poll()  # not select(): a wake-up pipe per run soon passes fd 1024
        for fd in (control.fileno(), wake_read, *waking):
            poller.register(fd, select.POLLIN)
        readable = {fd for fd, _ in poller.poll(timeout_ms)}
        if polled:
            enforce(polled, killed_cpu)
        for fd in readable:
            if fd in waking:
                report_early(control, waking[fd], ends, runs, killed_cpu, polled)
        if wake_read in readable:
            os.read(wake_read, 4096)
            reap(control, runs, networks, staged, killed_cpu, polled, ends, uids)
        if control.fileno() in readable:
            message, fds = receive(control)
            if not message:
                return  # the host closed the pool
            header = json.loads(message)
            if "preload" in header:
                preload(header, fds[0])
                continue
            if "seccomp" in header:
                seccomp[header["network"]] = bytes.fromhex(header["seccomp"])
                continue
            if "kill" in header:
                for pid, (run, _) in runs.items():
                    if run == header["kill"]:
                        killed_cpu[pid] = tree_cpu_time_s(pid, stop=True)  # noqa: F821 (from _proctree.py)  # lost from rusage once killed
                        os.kill(pid, signal.SIGKILL)
                continue
            if "stage" in header:
                stage(header, control, seccomp, runs, staged, ends)
                continue
            network = networks.take() if header["network"] == "none" else None
            slot = staged.pop(header.get("staged"), None)
            poll = header.get("poll") or {}
            if header["uid"] is not None and uids.size:
                uid = uids.take(None)  # held by the run's PID 1 once it has one (below)
                header["uid"] = uid
                message = json.dumps(header).encode()
            if slot is not None and slot[0] in runs:
                pid, sock = slot
                given = fds + ([network] if network is not None else [])
                try:
                    sock.sendmsg(
                        [message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", given))]
                    )
                except OSError:
                    pass  # it died first (its run killed at once, say): reaped as the run's end
                finally:
                    sock.close()
            else:
                if slot is not None:
                    slot[1].close()
                flags = NAMESPACES if network is not None else NAMESPACES | CLONE_NEWNET
                end = None
                try:
                    end = RunEnd()  # shared with the child
                    pid = clone_into_namespaces(flags)
                except OSError as error:  # this run fails, not the pool (EAGAIN, EMFILE...)
                    uids.give(None)
                    if end is not None:
                        end.close()
                    if network is not None:
                        networks.give(network)
                    for fd in fds:
                        os.close(fd)
                    failed = {"run": header["run"], "error": f"could not fork the run: {error}"}
                    control.send(json.dumps(failed).encode())
                    continue
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    control.close()
                    for other in ends.values():
                        other.close()
                    end.in_run()
                    init_process(
                        header, slots_of(header, fds), seccomp[header["network"]], network, end
                    )
                end.in_zygote()
                ends[pid] = end
            runs[pid] = (header["run"], network)
            if None in uids.of_pid:
                uids.of_pid[pid] = uids.of_pid.pop(None)
            began = {"began": header["run"], "at": time.monotonic()}  # the host's clocks
            control.send(json.dumps(began).encode())
            if poll:
                polled[pid] = [poll.get("cpu_time_s"), poll.get("memory_bytes"), 0, None]
            for fd in fds:
                os.close(fd)
            reap(control, runs, networks, staged, killed_cpu, polled, ends, uids)


def stage(header, control, seccomp, runs, staged, ends):
    """Clone a run's init ahead of its job (see :func:`staged_init`)."""
    made = []
    try:
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        made += [parent_end, child_end]
        end = RunEnd()  # shared with the child
        made.append(end)
        pid = clone_into_namespaces(NAMESPACES)
    except OSError as error:  # the run that would have used it gets a fresh clone instead
        os.write(2, f"execgym zygote: could not stage a run: {error!r}\n".encode())
        for thing in made:
            thing.close()
        return
    if pid == 0:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        control.close()
        parent_end.close()
        for _, other in staged.values():
            other.close()
        for other in ends.values():
            other.close()
        end.in_run()
        staged_init(header["cgroup_procs"], child_end, seccomp, end)
    child_end.close()
    end.in_zygote()
    ends[pid] = end
    staged[header["stage"]] = (pid, parent_end)
    runs[pid] = (None, None)


def enforce(polled, killed_cpu):
    """Sample each polled run's whole tree; kill one past its CPU time or memory."""
    for pid, state in polled.items():
        cpu_limit, memory_limit, _, why = state
        if why is not None:
            continue
        if memory_limit is not None:
            held = tree_rss_bytes(pid)  # noqa: F821 (from _proctree.py)
            state[2] = max(state[2], held)
            if held > memory_limit:
                state[3] = "memory_bytes"
        used = tree_cpu_time_s(pid) if cpu_limit is not None else 0.0  # noqa: F821
        if state[3] is None and cpu_limit is not None and used >= cpu_limit:
            state[3] = "cpu_time_s"
        if state[3] is not None:
            killed_cpu[pid] = tree_cpu_time_s(pid, stop=True)  # noqa: F821
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def send_end(control, run, pid, end, status, cpu_s, maxrss_kb, killed_cpu, polled):
    """Report run ``run`` (PID 1 ``pid``) as ended; its sampling stops."""
    _, _, peak, why = polled.pop(pid, (None, None, 0, None))
    started = end.field(0) if end is not None else -1  # -1: killed before its PID 1 counted
    written = end.field(1) if end is not None else -1
    control.send(
        json.dumps(
            {
                "run": run,
                "status": status,
                "cpu_s": max(cpu_s, killed_cpu.pop(pid, 0.0)),
                "maxrss_kb": maxrss_kb,
                "peak_bytes": peak,
                "killed_for": why,
                "processes": started if started >= 0 else None,
                "written": written if written >= 0 else None,
                "at": time.monotonic(),  # the run's end by the zygote's clock (CLOCK_MONOTONIC)
            }
        ).encode()
    )


def own_peak_kb(pid):
    """``pid``'s own peak resident memory (``VmHWM``) in KiB; 0 if unreadable."""
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass  # gone already: the page's figure stands alone
    return 0


def report_early(control, pid, ends, runs, killed_cpu, polled):
    """PID 1 of ``pid``'s run woke us: report the run now if it has finished it.

    PID 1 is execgym's code, but a rollout sharing its process (pytest ``in_process``)
    could write the page too. So the status must be one PID 1 writes (an exit code),
    the kernel's figures of PID 1 (itself and all it reaped: CPU to the clock tick, its
    own peak memory) are floors under the page's, and PID 1 is killed at once: it has
    nothing left to do, and a run that claimed to end ends.
    """
    end = ends[pid]
    os.close(end.wake)  # one wake-up per run; at the end of the file, PID 1 is gone
    end.wake = -1
    run, network = runs.get(pid, (None, None))
    if run is None or not end.finished():
        return  # PID 1 died before it finished: reported when reaped
    status = end.field(2)
    if not 0 <= status <= 0xFF00 or status & 0xFF:
        return  # not what PID 1 writes: the run is reported when PID 1 is reaped
    cpu_s = max(end.field(3) / 1e6, _cpu_ticks(pid) / CLOCK_TICKS)  # noqa: F821 (from _proctree.py)
    peak_kb = max(end.field(4), own_peak_kb(pid))
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass  # exited already
    send_end(control, run, pid, end, status, cpu_s, peak_kb, killed_cpu, polled)
    runs[pid] = (None, network)  # reaped later, but never reported twice


def reap(control, runs, networks, staged, killed_cpu, polled, ends, uids):
    while runs:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        end = ends.pop(pid, None)
        run, network = runs.pop(pid, (None, None))
        uids.give(pid)
        if network is not None:
            if end is not None and end.field(6) == 1:
                os.close(network)  # it held sockets of a run before: let it go
            else:
                networks.give(network)
        for slot, (staged_pid, sock) in list(staged.items()):
            if staged_pid == pid:  # a staged init died before its job: never use it
                sock.close()
                del staged[slot]
        if run is not None:
            cpu_s = usage.ru_utime + usage.ru_stime
            send_end(control, run, pid, end, status, cpu_s, usage.ru_maxrss, killed_cpu, polled)
        else:
            polled.pop(pid, None)
            killed_cpu.pop(pid, None)
        if end is not None:
            end.close()


serve()
