"""The seccomp filter of the bwrap sandbox, built with libseccomp (through pyseccomp).

The filter allows everything a normal program needs and refuses, with ``EPERM``, the
system calls that only serve to attack the kernel or escape: debugging other processes,
mounting, loading kernel code, new namespaces, BPF, keyrings, performance counters,
``userfaultfd`` (a classic exploit helper), ``io_uring`` (large attack surface), and
changing the clock. Sockets are allow-listed by family: with ``Limits.network ==
"none"`` only Unix sockets (asyncio and multiprocessing use them), so a program cannot
even talk to the sandbox's own loopback; with ``"loopback"`` also IPv4 and IPv6. Vsock,
packet, netlink and the other families are always refused (no network namespace
confines vsock). The same rules are added for the x86 and x32 system-call tables, since a 64-bit
process can still enter the kernel through them.

The list follows Docker's default profile and systemd's ``@mount``, ``@module``,
``@debug``, ``@reboot``, ``@swap``, ``@raw-io`` and ``@clock`` groups.

The compiled program is kept between processes (:mod:`execgym.program_cache`), keyed
by this file, the machine, pyseccomp's file and the libseccomp file it loaded, so a
command whose filter is cached imports neither pyseccomp nor :mod:`ctypes`, and runs
no ``ldconfig -p`` (pyseccomp runs it twice to find its libraries): about 10 ms of
``execgym score``'s start on a loaded 2-core machine (issue 23).
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import json
import os
import socket
import sys
from functools import cache
from pathlib import Path

from execgym.program_cache import cached_bytes

BLOCKED_SYSCALLS = (
    # other processes' memory and state
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    # mounts and file-system handles
    "mount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount", "fspick",
    "move_mount", "open_tree", "mount_setattr", "open_by_handle_at", "name_to_handle_at",
    "quotactl",
    # namespaces
    "unshare", "setns",
    # kernel code, BPF, keyrings, counters
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "bpf",
    "keyctl", "add_key", "request_key", "perf_event_open", "lookup_dcookie",
    # exploit helpers and large attack surfaces
    "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    # the machine
    "reboot", "swapon", "swapoff", "acct", "syslog", "vhangup", "iopl", "ioperm",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
)  # fmt: skip
"""System calls refused with EPERM inside the bwrap sandbox."""

_NETWORK_FAMILIES = (socket.AF_INET, socket.AF_INET6, socket.AF_PACKET, socket.AF_VSOCK)
"""Families a run with network "none" must not open (bwrap refuses all but AF_UNIX)."""

_NAMESPACE_FLAGS = (
    0x10000000,  # CLONE_NEWUSER
    0x00020000,  # CLONE_NEWNS
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
    0x08000000,  # CLONE_NEWIPC
    0x04000000,  # CLONE_NEWUTS
    0x02000000,  # CLONE_NEWCGROUP
)


@cache
def seccomp_program(network: str, *, tree: bool = True) -> bytes:
    """The compiled BPF program for bwrap's ``--seccomp`` option, cached on disk.

    The same program as :func:`build_seccomp_program`'s, kept in the program cache
    under everything it is made from: this module's source (the rules), ``network``,
    ``tree``, the machine, and the files of pyseccomp and of the libseccomp it loads
    (found once, with ``ldconfig -p``, and kept under the identity of the dynamic
    linker's cache, ``LD_LIBRARY_PATH`` and pyseccomp's file; an upgrade of either
    makes both again). Where pyseccomp is not installed or a file cannot be read, it
    is built as before (and fails as before).

    Raises:
        ImportError: if pyseccomp or libseccomp is missing (the caller reports it).
    """
    library = _library_identity()
    here = _file_identity(__file__)
    if library is None or here is None:
        return build_seccomp_program(network, tree=tree)
    machine = f"{os.uname().machine}:{sys.byteorder}".encode()
    inputs = (Path(__file__).read_bytes(), network.encode(), str(tree).encode(), machine, library)
    program = cached_bytes("seccomp", inputs, lambda: build_seccomp_program(network, tree=tree))
    if not _whole_program(program):  # a damaged entry (they are written whole): build it
        return build_seccomp_program(network, tree=tree)
    return program


def _whole_program(program: bytes) -> bool:
    """Whether ``program`` is whole classic BPF: 8-byte instructions, the last a return."""
    return bool(program) and len(program) % 8 == 0 and program[-8] & 0x07 == 0x06


def _file_identity(path: str) -> bytes | None:
    """``path``'s real path, size, modification time and inode (``None``: unreadable)."""
    try:
        real = os.path.realpath(path)
        info = os.stat(real)
    except OSError:
        return None
    return json.dumps([real, info.st_size, info.st_mtime_ns, info.st_ino]).encode()


def _library_identity() -> bytes | None:
    """The identity of pyseccomp's file and of the libseccomp file it loads.

    ``None`` when pyseccomp is not installed or a file cannot be read (no caching).
    """
    spec = importlib.util.find_spec("pyseccomp")
    origin = spec.origin if spec is not None else None
    module = _file_identity(origin) if origin else None
    if module is None:
        return None
    linker = _file_identity("/etc/ld.so.cache") or b"-"
    search = os.environ.get("LD_LIBRARY_PATH", "").encode()
    try:
        where = cached_bytes("seccomp-library", (module, linker, search), _loaded_library)
    except (ImportError, OSError):
        return None  # built as before, which says what is missing
    library = _file_identity(where.decode())
    return module + library if library is not None else None


def _loaded_library() -> bytes:
    """The path of the libseccomp file pyseccomp loaded (it finds it with ``ldconfig -p``).

    Raises:
        ImportError, OSError: pyseccomp or libseccomp is missing.
    """
    import pyseccomp  # noqa: F401 - loads libseccomp

    with open("/proc/self/maps", encoding="utf-8") as maps:
        for line in maps:
            path = line.split(maxsplit=5)[-1].strip()
            if os.path.basename(path).startswith("libseccomp.so"):
                return path.encode()
    raise OSError("libseccomp is not mapped after importing pyseccomp")


def build_seccomp_program(network: str, *, tree: bool = True) -> bytes:
    """The compiled BPF program for bwrap's ``--seccomp`` option, built with pyseccomp.

    Args:
        network: ``Limits.network``: ``"none"`` also refuses Internet sockets.
        tree: Lay the syscall numbers out as a binary tree rather than a linear chain
            (libseccomp >= 2.5; ignored by older ones): the same policy, checked in
            O(log n) on every system call the rollout makes, and about 20% cheaper for
            the kernel to load into each run, as it tries the filter on every syscall
            number then (``benchmarks/seccomp_filter.py``).

    Returns:
        The BPF program as bytes.

    Raises:
        ImportError: if pyseccomp or libseccomp is missing (the caller reports it).
    """
    import pyseccomp as seccomp

    refuse = seccomp.ERRNO(errno.EPERM)
    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    if tree:
        with contextlib.suppress(AttributeError, OSError, RuntimeError, ValueError):
            rules.set_attr(seccomp.Attr.CTL_OPTIMIZE, 2)
    for arch in (seccomp.Arch.X86, seccomp.Arch.X32):
        if not rules.exist_arch(arch):
            try:
                rules.add_arch(arch)
            except (OSError, RuntimeError, ValueError):
                continue  # not this machine's family (e.g. aarch64)
    for name in BLOCKED_SYSCALLS:
        try:
            rules.add_rule(refuse, name)
        except (OSError, RuntimeError, ValueError):
            continue  # unknown on this architecture
    # clone() with namespace flags: clone3 is refused outright with ENOSYS (its flags
    # live in memory seccomp cannot read), so libc falls back to clone(), checked here.
    for flag in _NAMESPACE_FLAGS:
        rules.add_rule(refuse, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    # Socket families: an allow-list. "none" keeps only Unix sockets; "loopback" adds
    # IPv4 and IPv6 (the namespace has only its own loopback). Everything else (vsock,
    # which no network namespace confines; packet, netlink, AF_ALG...) is refused.
    if network == "none":
        rules.add_rule(refuse, "socket", seccomp.Arg(0, seccomp.NE, socket.AF_UNIX))
    else:
        rules.add_rule(refuse, "socket", seccomp.Arg(0, seccomp.GT, socket.AF_INET6))
        for family in range(socket.AF_INET6):
            if family not in (socket.AF_UNIX, socket.AF_INET):
                rules.add_rule(refuse, "socket", seccomp.Arg(0, seccomp.EQ, family))
    fd = os.memfd_create("execgym-seccomp", os.MFD_CLOEXEC)
    with os.fdopen(fd, "w+b") as handle:
        rules.export_bpf(handle)  # libseccomp writes to the descriptor itself
        handle.seek(0)
        return handle.read()
