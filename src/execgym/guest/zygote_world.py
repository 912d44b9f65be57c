"""The warm pool zygote's hold on the kernel: namespaces, mounts, seccomp, uids, I/O.

A part of the zygote bundle (see :mod:`execgym.guest.zygote`; runs INSIDE the pool's
bwrap sandbox, standard library only): the constants and calls into libc that both the
zygote and a run's PID 1 use to build a run's world.

What runs in a fresh fork is written to copy few pages: every page a fork writes that
it still shares with its parent is a copy-on-write fault (about 2.5 us of CPU here),
and forks are most of a rollout's CPU time (see docs/benchmarks.md). So the code there
calls ``_signal``, the C module behind ``signal``, and not ``signal.signal``: that
wrapper turns the signal and the old handler into enum members (``Signals``,
``Handlers``), and the walk through the enum machinery wrote about 70 shared pages.
Every fork of a run's harness ran one in an at-fork hook (its solution's process, and
one fork per call of the tests with fresh state): about 800 of a rollout's 4,700 page
faults on HumanEval.
"""

import ctypes
import fcntl
import os
import signal
import socket

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 0x4000, 1 << 18
MS_RDONLY, MS_REMOUNT, MS_BIND = 1, 32, 4096
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, PR_CAPBSET_DROP = 1, 38, 22, 24
SECCOMP_MODE_FILTER = 2
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1

NAMESPACES = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
SYS_CLONE = {"x86_64": 56, "aarch64": 220}
PROGRAMS = {}  # key -> (code, None) or (namespace, entry): trusted programs preloaded

libc = ctypes.CDLL(None, use_errno=True)
python_libc = ctypes.PyDLL(None, use_errno=True)  # keeps the GIL across the call: for clone
python = ctypes.pythonapi


def trim_heap():
    """Give the C heap's free pages back to the kernel (glibc's ``malloc_trim(0)``).

    Every run is a fork of the zygote, and a fork costs CPU time in proportion to the
    pages the parent has mapped (copied page tables, then torn down at exit). Compiling
    the zygote's own source (about 50 KB) leaves about 2 MiB of freed parser memory
    resident in the heap, 16 % of the zygote; the pages handed back are never copied
    again. Other C libraries (musl) have no ``malloc_trim``: nothing is trimmed there.
    """
    try:
        libc.malloc_trim(0)
    except AttributeError:
        pass


def check(result, what):
    if result < 0:
        error = ctypes.get_errno()
        raise OSError(error, what + ": " + os.strerror(error))
    return result


class SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


class SeccompFilter:
    """A seccomp program as the kernel takes it, built once in the zygote.

    Every run loads one of two programs (network "none" or "loopback"); building the
    ``sock_fprog`` and its buffer in the zygote leaves a run's process only the
    ``prctl`` (its ctypes objects, made in each fresh fork, cost about 0.1 ms there).
    """

    def __init__(self, program):
        self.buffer = ctypes.create_string_buffer(program, len(program))
        self.fprog = SockFprog(len(program) // 8, ctypes.addressof(self.buffer))
        self.pointer = ctypes.byref(self.fprog)


def load_seccomp(prepared):
    """Load ``prepared`` (a :class:`SeccompFilter`) on this thread, for good."""
    check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prepared.pointer, 0, 0), "seccomp")


def drop_bounding_set():
    """Drop every capability from this process's bounding set (the zygote's, once).

    The bounding set only limits what an ``execve`` may grant; the zygote never execs,
    and the capabilities it uses (mounts, namespaces, uids) are in its effective set,
    which this leaves alone. Every run inherits the empty set, as if its process had
    dropped each capability itself: 64 ``prctl`` calls through ctypes in every run's
    fork were about 0.24 ms of CPU (measured 2026-12-03). Capabilities past the
    kernel's last one fail with ``EINVAL``, which is ignored.
    """
    for cap in range(64):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)


RUN_ENVIRON = []
"""The items, in order, that ``os.environ`` holds in this process (see :func:`set_environ`)."""


def set_environ(env):
    """Make ``os.environ`` exactly ``env`` (same items, same order).

    Clearing and refilling it (``unsetenv``/``putenv`` for each entry, through
    ``os.environ``'s Python methods) cost a run's fresh fork about 0.27 ms; runs almost
    always have the environment of the run before them. So the zygote sets each new
    environment in itself (once per change), every fork inherits it, and a run's
    process refills its environment only when its own differs in any item or in order.
    """
    items = list(env.items())
    if items == RUN_ENVIRON:
        return
    os.environ.clear()
    os.environ.update(env)
    RUN_ENVIRON[:] = items


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


def wchar(fd):
    for line in os.pread(fd, 4096, 0).splitlines():
        if line.startswith(b"wchar:"):
            return int(line.split()[1])
    raise ValueError("no wchar")
