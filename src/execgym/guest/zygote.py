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
   loads the seccomp filter, reseeds ``random`` if a preloaded program imported it
   (a run that imports it seeds it afresh), and only then runs the script (or the
   preloaded code it names).

The host may stage a run's init ahead of its job with ``{"stage": slot, "cgroup_procs":
[...]}``: the child is cloned and joins its cgroups (step 1, which sleeps for milliseconds
on some kernels) while earlier runs execute, then waits, with no job and no untrusted
code, until a job naming ``"staged": slot`` arrives; it then goes on from step 2.

The zygote itself never reads a job's contents (they stay in the passed descriptors),
so no rollout can find another's program, tests or nonce in memory it inherits. It
runs as the bundle ``zygote`` (:data:`execgym.guest.BUNDLES`): :mod:`.proctree` (CPU and
memory of a process tree), :mod:`.zygote_world` (the kernel calls), :mod:`.zygote_run`
(a run's PID 1 and program), then this module (the loop, :class:`Zygote`). It
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

import _signal
import array
import gc
import json
import os
import resource
import select
import signal
import socket
import sys
import time

from .proctree import _cpu_ticks, tree_cpu_time_s, tree_rss_bytes
from .zygote_run import RunEnd, init_process, preload, receive, slots_of, staged_init
from .zygote_world import (
    CLONE_NEWNET,
    NAMESPACES,
    NetworkNamespaces,
    RunUids,
    SeccompFilter,
    clone_into_namespaces,
    drop_bounding_set,
    set_environ,
    trim_heap,
)

PRELOADED = (
    "abc", "bisect", "collections", "copy", "enum", "functools", "heapq", "itertools",
    "math", "operator", "re", "string", "sys", "typing",
)  # fmt: skip
"""Modules imported once here for every run: small ones that many programs import.

Each run's processes, and each call's fork of a loaded solution, are forks of this
process, and a fork costs per MiB and per mapping it inherits (page tables copied, then
torn down: a fork and exit of this image took 1.08-1.70 ms of CPU with them, 0.90-1.27
without, in three alternated rounds at a load of 17-20). ``dataclasses`` (with ``inspect``,
``ast``, ``dis``), ``hashlib`` (OpenSSL), ``random``, ``decimal``, ``fractions`` and
``statistics`` were preloaded too: 2.2 MiB and 42 mappings that no guest code uses and
few programs import (5 of HumanEval's 164 tasks); those pay the import (random 0.7 ms,
hashlib 2.9 ms) in their own run. See docs/benchmarks.md, "What one call's fork costs".
"""

POLL_S = 0.05  # how often runs with no cgroup have their CPU time and memory sampled
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # the unit of CPU times in /proc/<pid>/stat


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
    drop_bounding_set()  # for every run, once (see its docstring)
    gc.collect()
    trim_heap()  # every run's fork copies what the zygote holds
    gc.freeze()
    control = socket.socket(fileno=int(sys.argv[-1]))
    control.setblocking(True)
    Zygote(control, RunUids(int(sys.argv[-3]), int(sys.argv[-2]))).serve()


class Zygote:
    """The zygote's state, which its loop and each step of it share.

    Attributes:
        control: The socket to the host (requests in, began/end reports out).
        uids: The run uids leased to the pool (:class:`RunUids`).
        seccomp: Network mode -> the seccomp filter runs of that mode load
            (a :class:`SeccompFilter`, built once here).
        runs: pid -> (run id, or None while staged or once reported; the reused
            network namespace or None).
        ends: pid -> the :class:`RunEnd` its PID 1 reports the run's end through.
        staged: slot id -> (pid of a staged init, socket to send it its job).
        networks: The clean network namespaces kept for reuse.
        killed_cpu: pid -> CPU seconds its tree had used when the zygote killed it.
        polled: pid -> [cpu limit, memory limit, peak bytes, why killed], for runs
            with no cgroup, whose trees the zygote samples.
    """

    def __init__(self, control, uids):
        self.control = control
        self.uids = uids
        self.seccomp = {}
        self.runs = {}
        self.ends = {}
        self.staged = {}
        self.networks = NetworkNamespaces()
        self.killed_cpu = {}
        self.polled = {}

    def serve(self):
        """Serve requests until the host closes the control socket."""
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_write, False)
        signal.set_wakeup_fd(wake_write)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.control.send(
            json.dumps({"ready": os.getpid(), "cache_tag": sys.implementation.cache_tag}).encode()
        )
        while True:
            timeout_ms = POLL_S * 1000 if self.polled else None
            waking = {end.wake: pid for pid, end in self.ends.items() if end.wake >= 0}
            poller = select.poll()  # not select(): a wake-up pipe per run soon passes fd 1024
            for fd in (self.control.fileno(), wake_read, *waking):
                poller.register(fd, select.POLLIN)
            readable = {fd for fd, _ in poller.poll(timeout_ms)}
            if self.polled:
                self.enforce()
            for fd in readable:
                if fd in waking:
                    self.report_early(waking[fd])
            if wake_read in readable:
                os.read(wake_read, 4096)
                self.reap()
            if self.control.fileno() in readable:
                message, fds = receive(self.control)
                if not message:
                    return  # the host closed the pool
                header = json.loads(message)
                if "preload" in header:
                    preload(header, fds[0])
                    continue
                if "seccomp" in header:
                    program = bytes.fromhex(header["seccomp"])
                    self.seccomp[header["network"]] = SeccompFilter(program)
                    continue
                if "kill" in header:
                    for pid, (run, _) in self.runs.items():
                        if run == header["kill"]:
                            # lost from rusage once killed
                            self.killed_cpu[pid] = tree_cpu_time_s(pid, stop=True)
                            os.kill(pid, signal.SIGKILL)
                    continue
                if "stage" in header:
                    self.stage(header)
                    continue
                self.start_run(header, message, fds)

    def start_run(self, header, message, fds):
        """Start the run ``header`` asks for, with its descriptors ``fds``.

        Its staged init, if the host named one that is still alive, receives the job;
        else a fresh child is cloned into new namespaces. The host hears ``began``.
        """
        set_environ(header["env"])  # inherited by this run's fork and later staged ones
        network = self.networks.take() if header["network"] == "none" else None
        slot = self.staged.pop(header.get("staged"), None)
        poll = header.get("poll") or {}
        if header["uid"] is not None and self.uids.size:
            uid = self.uids.take(None)  # held by the run's PID 1 once it has one (below)
            header["uid"] = uid
            message = json.dumps(header).encode()
        if slot is not None and slot[0] in self.runs:
            pid, sock = slot
            given = fds + ([network] if network is not None else [])
            try:
                sock.sendmsg(
                    [message],
                    [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", given))],
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
                self.uids.give(None)
                if end is not None:
                    end.close()
                if network is not None:
                    self.networks.give(network)
                for fd in fds:
                    os.close(fd)
                failed = {"run": header["run"], "error": f"could not fork the run: {error}"}
                self.control.send(json.dumps(failed).encode())
                return
            if pid == 0:
                _signal.set_wakeup_fd(-1)
                _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)  # not signal: see zygote_world
                self.control.close()
                for other in self.ends.values():
                    other.close()
                end.in_run()
                init_process(
                    header,
                    slots_of(header, fds),
                    self.seccomp[header["network"]],
                    network,
                    end,
                )
            end.in_zygote()
            self.ends[pid] = end
        self.runs[pid] = (header["run"], network)
        if None in self.uids.of_pid:
            self.uids.of_pid[pid] = self.uids.of_pid.pop(None)
        began = {"began": header["run"], "at": time.monotonic()}  # the host's clocks
        self.control.send(json.dumps(began).encode())
        if poll:
            self.polled[pid] = [poll.get("cpu_time_s"), poll.get("memory_bytes"), 0, None]
        for fd in fds:
            os.close(fd)
        self.reap()

    def stage(self, header):
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
            _signal.set_wakeup_fd(-1)
            _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)  # not signal: see zygote_world
            self.control.close()
            parent_end.close()
            for _, other in self.staged.values():
                other.close()
            for other in self.ends.values():
                other.close()
            end.in_run()
            staged_init(header["cgroup_procs"], child_end, self.seccomp, end)
        child_end.close()
        end.in_zygote()
        self.ends[pid] = end
        self.staged[header["stage"]] = (pid, parent_end)
        self.runs[pid] = (None, None)

    def enforce(self):
        """Sample each polled run's whole tree; kill one past its CPU time or memory."""
        for pid, state in self.polled.items():
            cpu_limit, memory_limit, _, why = state
            if why is not None:
                continue
            if memory_limit is not None:
                held = tree_rss_bytes(pid)
                state[2] = max(state[2], held)
                if held > memory_limit:
                    state[3] = "memory_bytes"
            used = tree_cpu_time_s(pid) if cpu_limit is not None else 0.0
            if state[3] is None and cpu_limit is not None and used >= cpu_limit:
                state[3] = "cpu_time_s"
            if state[3] is not None:
                self.killed_cpu[pid] = tree_cpu_time_s(pid, stop=True)
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass

    def send_end(self, run, pid, end, status, cpu_s, maxrss_kb):
        """Report run ``run`` (PID 1 ``pid``) as ended; its sampling stops."""
        _, _, peak, why = self.polled.pop(pid, (None, None, 0, None))
        started = end.field(0) if end is not None else -1  # -1: killed before its PID 1 counted
        written = end.field(1) if end is not None else -1
        self.control.send(
            json.dumps(
                {
                    "run": run,
                    "status": status,
                    "cpu_s": max(cpu_s, self.killed_cpu.pop(pid, 0.0)),
                    "maxrss_kb": maxrss_kb,
                    "peak_bytes": peak,
                    "killed_for": why,
                    "processes": started if started >= 0 else None,
                    "written": written if written >= 0 else None,
                    "at": time.monotonic(),  # the run's end by the zygote's clock (CLOCK_MONOTONIC)
                }
            ).encode()
        )

    def report_early(self, pid):
        """PID 1 of ``pid``'s run woke us: report the run now if it has finished it.

        PID 1 is execgym's code, but a rollout sharing its process (pytest ``in_process``)
        could write the page too. So the status must be one PID 1 writes (an exit code),
        the kernel's figures of PID 1 (itself and all it reaped: CPU to the clock tick, its
        own peak memory) are floors under the page's, and PID 1 is killed at once: it has
        nothing left to do, and a run that claimed to end ends.
        """
        end = self.ends[pid]
        os.close(end.wake)  # one wake-up per run; at the end of the file, PID 1 is gone
        end.wake = -1
        run, network = self.runs.get(pid, (None, None))
        if run is None or not end.finished():
            return  # PID 1 died before it finished: reported when reaped
        status = end.field(2)
        if not 0 <= status <= 0xFF00 or status & 0xFF:
            return  # not what PID 1 writes: the run is reported when PID 1 is reaped
        cpu_s = max(end.field(3) / 1e6, _cpu_ticks(pid) / CLOCK_TICKS)
        peak_kb = max(end.field(4), own_peak_kb(pid))
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass  # exited already
        self.send_end(run, pid, end, status, cpu_s, peak_kb)
        self.runs[pid] = (None, network)  # reaped later, but never reported twice

    def reap(self):
        while self.runs:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            end = self.ends.pop(pid, None)
            run, network = self.runs.pop(pid, (None, None))
            self.uids.give(pid)
            if network is not None:
                if end is not None and end.field(6) == 1:
                    os.close(network)  # it held sockets of a run before: let it go
                else:
                    self.networks.give(network)
            for slot, (staged_pid, sock) in list(self.staged.items()):
                if staged_pid == pid:  # a staged init died before its job: never use it
                    sock.close()
                    del self.staged[slot]
            if run is not None:
                cpu_s = usage.ru_utime + usage.ru_stime
                self.send_end(run, pid, end, status, cpu_s, usage.ru_maxrss)
            else:
                self.polled.pop(pid, None)
                self.killed_cpu.pop(pid, None)
            if end is not None:
                end.close()


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


serve()
