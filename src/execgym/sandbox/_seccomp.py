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
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from functools import cache

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
    """The compiled BPF program for bwrap's ``--seccomp`` option.

    Args:
        network: ``Limits.network``: ``"none"`` also refuses Internet sockets.
        tree: Lay the syscall numbers out as a binary tree rather than a linear chain
            (libseccomp >= 2.5; ignored by older ones): the same policy, checked in
            O(log n) on every system call the rollout makes, and about 20% cheaper for
            the kernel to load into each run, as it tries the filter on every syscall
            number then (``benchmarks/seccomp_filter.py``).

    Returns:
        The BPF program as bytes (built once per process and network mode).

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
