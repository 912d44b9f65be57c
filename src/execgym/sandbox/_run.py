"""The life of one run, shared by every backend: cgroup, rlimits, spawn, reap, clean up."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from resource import RLIMIT_NPROC

from execgym.errors import TaskError
from execgym.limits import Limits
from execgym.sandbox._cgroup import RunCgroup, detect_cgroups
from execgym.sandbox._process import ProcessSpec, run_process
from execgym.sandbox._results import interpret, sandbox_error
from execgym.sandbox._rlimits import reserves_address_space, rlimits_for
from execgym.sandbox.base import RunResult

BASE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONIOENCODING": "utf-8",
    "PYTHONUTF8": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}
"""The whole environment of a sandboxed program, before per-run additions.

UTF-8 is forced so that a correct program printing non-ASCII text never fails on the
host's locale; nothing from the host's own environment is passed in.
"""


def enforcement_of(
    limits: Limits,
    cgroup: RunCgroup | None,
    *,
    apply_rlimits: bool = True,
    backend: Mapping[str, str] | None = None,
    polls_tree: bool = True,
    reserves_address_space: bool = False,
) -> tuple[list[tuple[int, int, int]], dict[str, str]]:
    """The rlimits of a run and how each of its limits is enforced.

    Args:
        limits: The run's limits.
        cgroup: Its cgroup, with ``limits`` applied, or ``None``.
        apply_rlimits: Whether the rlimits will be set (see :func:`run_contained`).
        backend: How the backend itself enforces limits (network, disk...).
        polls_tree: Without a cgroup measuring CPU, the supervisor samples the whole
            tree's CPU time from ``/proc`` (the launcher is our child) and enforces
            ``cpu_time_s`` on it; ``False`` where it cannot (the warm pool's runs).
            Without a cgroup limiting memory, it samples the tree's resident memory
            too and enforces ``memory_bytes`` on it (:func:`polls_memory`).
        reserves_address_space: The program reserves far more address space than it
            uses (see :func:`~execgym.sandbox._rlimits.rlimits_for`): no ``RLIMIT_AS``.

    Returns:
        ``([(resource, soft, hard), ...], {limit name: how it is enforced})``.
    """
    cgroup_enforced = dict(cgroup.enforced) if cgroup else {}
    rlimits, rlimit_enforced = rlimits_for(
        limits, cgroup_enforced=cgroup_enforced, reserves_address_space=reserves_address_space
    )
    if polls_tree and polls_memory(cgroup, apply_rlimits):
        sampled = "whole tree's resident memory sampled from /proc every 50 ms"
        rlimit_enforced["memory_bytes"] = (
            sampled + " (no RLIMIT_AS: this runtime reserves address space up front)"
            if reserves_address_space
            else rlimit_enforced["memory_bytes"] + " + " + sampled
        )
    if not apply_rlimits:
        rlimits, rlimit_enforced = [], dict.fromkeys(rlimit_enforced, "not enforced")
    if cgroup and cgroup.measures_cpu:
        measured = {"cpu_time_s": f"cgroup-v{cgroup.version} (whole tree)"}
    elif polls_tree and apply_rlimits:
        measured = {"cpu_time_s": "whole tree sampled from /proc + rlimit (per process)"}
    else:
        measured = {}
    how = {
        "wall_time_s": "timer + kill of the whole tree",
        "max_output_bytes": "capture cap + kill",
        **rlimit_enforced,
        **measured,
        **cgroup_enforced,
        **(backend or {}),
    }
    if cgroup is None:
        how["cgroup"] = f"none: {detect_cgroups().reason}"
    return rlimits, how


MAX_ARG_STRLEN = 32 * 4096
"""Linux's limit on one argument or environment entry, its final NUL included (bytes)."""


def check_exec_size(argv: Sequence[str], env: Mapping[str, str]) -> None:
    """Refuse a command Linux would refuse to start (``E2BIG``), naming what is too big.

    A caller's input, not a sandbox failure: one word may hold at most
    :data:`MAX_ARG_STRLEN` bytes, and all words and entries with their pointers at most
    ``sysconf(SC_ARG_MAX)`` (a quarter of the stack limit; 2 MiB by default).

    Raises:
        TaskError: if a word or the whole command is too big to ``exec``.
    """
    total = 0
    for kind, words in (("argv", list(argv)), ("env", [f"{k}={v}" for k, v in env.items()])):
        for position, word in enumerate(words):
            size = len(word.encode("utf-8", "surrogateescape")) + 1
            if size > MAX_ARG_STRLEN:
                raise TaskError(
                    f"{kind}[{position}] is {size} bytes; Linux starts no program with an "
                    f"argument or environment entry over {MAX_ARG_STRLEN} bytes: pass large "
                    "data as a file or on stdin"
                )
            total += size + 8  # the word and its pointer
    limit = os.sysconf("SC_ARG_MAX")
    if total > limit:
        raise TaskError(
            f"the command line and environment take {total} bytes, over this host's "
            f"{limit} (ARG_MAX): pass large data as a file or on stdin"
        )


def polls_memory(cgroup: RunCgroup | None, apply_rlimits: bool) -> bool:
    """Whether the supervisor enforces ``memory_bytes`` by sampling the tree's memory.

    So it does where no cgroup limits memory and the tree on the host is the run's own
    processes (not a user-space kernel's, as with runsc, which sets its limits inside).
    """
    return apply_rlimits and not (cgroup is not None and "memory_bytes" in cgroup.enforced)


async def run_contained(
    argv: Sequence[str],
    *,
    isolation: str,
    env: Mapping[str, str],
    stdin: bytes,
    limits: Limits,
    fd_map: Mapping[int, int],
    want_report: bool,
    cwd: str | None = None,
    enforcement: Mapping[str, str] | None = None,
    shifted_signals: bool = False,
    report_path: str | None = None,
    apply_rlimits: bool = True,
    hold_fds: tuple[int, int] | None = None,
    own_user_namespace: bool = False,
    count_writes: bool = False,
    stdin_mode: int | None = None,
) -> RunResult:
    """Run ``argv`` in a fresh cgroup (when the host has one) and reclaim everything.

    Args:
        argv: The launcher command (for example ``bwrap ... -- python ...``).
        isolation: Name of the backend, for the result.
        env: The complete environment of the launcher.
        stdin: Bytes for stdin.
        limits: The run's limits.
        fd_map: Extra descriptors, ``{fd in child: fd in parent}``.
        want_report: Collect the report channel on fd 3.
        cwd: Host-side working directory of the launcher.
        enforcement: How the backend itself enforces limits (network, disk...).
        shifted_signals: The launcher reports signal N as exit code 128 + N.
        report_path: A FIFO the sandbox opens by name as its report channel, instead of
            inheriting fd 3 (see :class:`~execgym.sandbox._process.ProcessSpec`).
        apply_rlimits: Set the rlimits on the launcher, and so on all it starts. A
            launcher that sets them inside its own sandbox (runsc) passes ``False``:
            they would limit its own processes. Its ``enforcement`` then says how they
            are enforced; any it does not name is reported ``"not enforced"``.
        hold_fds: bwrap's ``--info-fd`` and ``--block-fd`` numbers in ``argv``, if it
            holds its own sandbox until the cgroup is set (see ``ProcessSpec``).
        own_user_namespace: The held sandbox has a user namespace of its own (bwrap
            as an ordinary user). Where no pids cgroup exists, ``RLIMIT_NPROC`` is then
            set inside it to ``max_processes`` plus one for bwrap's init: it counts only
            that namespace's processes there, not the user's others.
        count_writes: The launcher is the program: measure the run's ``bytes_written``
            from it (see :attr:`~execgym.sandbox._process.ProcessSpec.count_writes`).
        stdin_mode: File mode for stdin's in-memory file (see ``ProcessSpec``).

    Returns:
        The :class:`RunResult`; a failure to set the run up is a ``SANDBOX_ERROR``
        result, never an exception, so one broken run never sinks a batch.
    """
    try:
        cgroup = RunCgroup.create(limits)
    except OSError as error:
        return sandbox_error(isolation, f"could not create the run's cgroup: {error}")
    try:
        rlimits, how = enforcement_of(
            limits,
            cgroup,
            apply_rlimits=apply_rlimits,
            backend=enforcement,
            reserves_address_space=reserves_address_space(argv, env),
        )
        held: list[tuple[int, int, int]] = []
        if hold_fds and own_user_namespace and any(r[0] == RLIMIT_NPROC for r in rlimits):
            inside = limits.max_processes + 1  # bwrap's init is pid 1 of the namespace
            held = [(RLIMIT_NPROC, inside, inside)]
            how["max_processes"] = "rlimit-nproc (counts the run's own user namespace only)"
        spec = ProcessSpec(
            argv=argv,
            env=env,
            stdin=stdin,
            cwd=cwd,
            rlimits=rlimits,
            cgroup=cgroup,
            fd_map=fd_map,
            want_report=want_report,
            report_path=report_path,
            wall_time_s=limits.wall_time_s,
            cpu_time_s=limits.cpu_time_s,
            max_output_bytes=limits.max_output_bytes,
            hold_fds=hold_fds,
            held_rlimits=held,
            memory_bytes=limits.memory_bytes if polls_memory(cgroup, apply_rlimits) else None,
            count_writes=count_writes,
            stdin_mode=stdin_mode,
        )
        outcome = await run_process(spec)
    except OSError as error:
        return sandbox_error(isolation, f"could not start the sandbox: {error}")
    finally:
        if cgroup is not None:
            cgroup.remove_soon()  # always, even on our own errors or a cancellation
    return interpret(
        outcome,
        isolation=isolation,
        enforcement=how,
        shifted_signals=shifted_signals,
        memory_bytes=limits.memory_bytes,
    )
