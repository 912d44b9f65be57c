"""One Python run forked from the warm pool's zygote, step by step.

:class:`ForkedRun` is one run's host side: it opens the run's descriptors
(:meth:`~ForkedRun.open_descriptors`), hands the job to the zygote and waits for it to
start the run (:meth:`~ForkedRun.hand_over`), supervises it until it ends
(:meth:`~ForkedRun.supervise`) and reads what happened (:meth:`~ForkedRun.result`).
The zygote never reads a job's contents: they travel in descriptors it only hands on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from execgym.errors import SandboxSetupFailed
from execgym.limits import Limits
from execgym.sandbox._cgroup import RunCgroup
from execgym.sandbox._process import memfd_with
from execgym.sandbox._results import interpret
from execgym.sandbox._run import enforcement_of
from execgym.sandbox._supervise import ProcessOutcome, RunPipes, outcome_of, supervised
from execgym.sandbox.base import RunResult
from execgym.sandbox.bwrap import SANDBOX_UID
from execgym.sandbox.pool._control import ZygoteControl
from execgym.sandbox.pool._staging import procs_in_zygote


def zygote_polls(limits: Limits, cgroup: RunCgroup | None) -> dict[str, float]:
    """What the zygote samples and enforces for a run, where no cgroup does it.

    ``{"cpu_time_s": s, "memory_bytes": n}`` (either or both, or empty): the run's whole
    tree is read from the zygote's ``/proc`` every 50 ms and killed past either figure.
    """
    poll: dict[str, float] = {}
    if cgroup is None or not cgroup.measures_cpu:
        poll["cpu_time_s"] = limits.cpu_time_s
    if cgroup is None or "memory_bytes" not in cgroup.enforced:
        poll["memory_bytes"] = limits.memory_bytes
    return poll


@dataclasses.dataclass(frozen=True, slots=True)
class Job:
    """What one pooled run is: its script, input, files (packed), limits, environment.

    Attributes:
        source: The Python script.
        stdin: Its stdin; empty means ``/dev/null``.
        archive: Its files, packed (:func:`~execgym.sandbox._paths.archive_files`).
        limits: Its limits.
        env: Its whole environment.
        want_report: Whether it has the report channel on fd 3.
        program: The key of its preloaded code in the zygote, if it is a trusted one.
    """

    source: bytes
    stdin: bytes
    archive: bytes
    limits: Limits
    env: Mapping[str, str]
    want_report: bool
    program: str | None


class ForkedRun:
    """One run forked from the zygote: its descriptors, clocks and end report.

    Args:
        zygote: The running zygote.
        run_id: The run's number (unique among the zygote's runs and staged slots).
        job: What to run.
        cgroup: The run's cgroup (a staged one, or new), if cgroups are usable.
        slot: The staged init that takes the run, if any.
        backend_how: The bwrap backend's enforcement figures for ``job.limits``.
        on_sent: Called once the job is sent (the pool stages the next init then).
    """

    def __init__(
        self,
        zygote: ZygoteControl,
        run_id: int,
        job: Job,
        cgroup: RunCgroup | None,
        slot: int | None,
        backend_how: Mapping[str, str],
        on_sent: Callable[[], None],
    ) -> None:
        self._zygote = zygote
        self._on_sent = on_sent
        self._run_id = run_id
        self._job = job
        self._cgroup = cgroup
        self._slot = slot
        self._rlimits, self.how = enforcement_of(
            job.limits, cgroup, backend=dict(backend_how), polls_tree=False
        )
        self._poll = zygote_polls(job.limits, cgroup)
        if "cpu_time_s" in self._poll:
            self.how["cpu_time_s"] = (
                "whole tree sampled from /proc every 50 ms by the zygote + rlimit (per process)"
            )
        if "memory_bytes" in self._poll:
            self.how["memory_bytes"] = (
                "whole tree's resident memory sampled from /proc every 50 ms by the zygote + "
                + self.how["memory_bytes"]
            )
        loop = asyncio.get_running_loop()
        self._exited: asyncio.Future[dict[str, Any]] = loop.create_future()
        self._began: asyncio.Future[float | None] = loop.create_future()

    async def run(self) -> RunResult:
        """Every step, in order; see the module docstring.

        Raises:
            OSError: if a descriptor cannot be opened, or the zygote takes no job.
            SandboxSetupFailed: if the zygote could not start the run, or went away.
        """
        pipes, given = self.open_descriptors()
        started, began_at = await self.hand_over(pipes, given)
        outcome = await self.supervise(pipes, started, began_at)
        return self.result(outcome)

    def open_descriptors(self) -> tuple[RunPipes, list[int]]:
        """The run's pipes, and the descriptors the zygote hands to its fork.

        In slot order: stdin (a memfd, or ``/dev/null``), stdout, stderr, the report
        channel (with ``want_report``), the packed files and the script.

        Raises:
            OSError: (``EMFILE`` with hundreds of runs at once) after closing what was
                opened.
        """
        job = self._job
        pipes = RunPipes(want_report=job.want_report)
        given: list[int] = []
        try:
            writes = pipes.write_ends
            given += [
                memfd_with(job.stdin, "execgym-stdin")
                if job.stdin
                else os.open(os.devnull, os.O_RDONLY)
            ]
            given += [writes["stdout"], writes["stderr"]]
            given += [writes["report"]] if job.want_report else []
            given += [memfd_with(job.archive, "execgym-files")]
            given += [memfd_with(job.source, "execgym-script")]
        except OSError:
            for fd in {*given, *(fd for ends in pipes.ends.values() for fd in ends)}:
                os.close(fd)
            raise
        return pipes, given

    def _header(self) -> dict[str, Any]:
        job = self._job
        return {
            "run": self._run_id,
            "slots": [0, 1, 2, 3, 4, 5] if job.want_report else [0, 1, 2, 4, 5],
            "rlimits": self._rlimits,
            "uid": SANDBOX_UID if self._zygote.as_root else None,
            "network": job.limits.network,
            "disk_bytes": job.limits.disk_bytes,
            "env": job.env,
            "cgroup_procs": procs_in_zygote(self._cgroup),
            "staged": self._slot,
            "program": job.program,
            "poll": self._poll,
        }

    def _abandon(self, pipes: RunPipes) -> None:
        """The run will not be watched: forget it, free our ends."""
        self._zygote.pending.pop(self._run_id, None)
        self._zygote.began.pop(self._run_id, None)
        for future in (self._exited, self._began):  # failed by broken() meanwhile, perhaps
            if future.done() and not future.cancelled():
                future.exception()
        pipes.close_read_ends()

    async def hand_over(self, pipes: RunPipes, given: list[int]) -> tuple[float, float]:
        """Send the job (closing ``given``) and wait for the zygote to start the run.

        Returns:
            ``(started, began_at)``: when we saw it start, and when it began by the
            zygote's clock when that is sane (else ``started``); both monotonic seconds.
        """
        self._zygote.pending[self._run_id] = self._exited
        self._zygote.began[self._run_id] = self._began
        sent = time.monotonic()
        try:
            await self._zygote.send(json.dumps(self._header()).encode(), given)
        except BaseException:
            self._abandon(pipes)
            raise
        finally:
            for fd in given:
                os.close(fd)
        self._on_sent()
        try:
            # The clocks start when the zygote starts the run, not while the job waits
            # in its queue (hundreds at once on a busy machine): a run is never timed
            # out for our queue, and a kill never goes to a run not forked yet.
            zygote_began = await self._began
        except BaseException:
            self._abandon(pipes)
            raise
        started = time.monotonic()
        # The wall time reported is the zygote's (CLOCK_MONOTONIC, the host's too: no time
        # namespace): this coroutine may resume much later on a busy event loop, even
        # after the run ended (its wall time was then near 0, which --calibrate-limits
        # took for the reference's). The limit is still enforced from `started`: a run
        # is never timed out for our event loop's lateness.
        began_at = started
        if zygote_began is not None and sent <= zygote_began <= started:
            began_at = zygote_began
        return started, began_at

    def _kill(self) -> None:
        if self._cgroup is not None:
            # One pass, not a wait on the event loop (the removal kills until empty);
            # the zygote also kills the run's PID 1 by its pid, which takes the
            # whole PID namespace with it, even one still joining its cgroup.
            self._cgroup.kill(until_empty=False)
        self._zygote.kill_run(self._run_id)

    async def supervise(self, pipes: RunPipes, started: float, began_at: float) -> ProcessOutcome:
        """Enforce the run's clocks and output caps until its end report, and drain.

        Raises:
            SandboxSetupFailed: if the zygote reports that it could not start the run.
        """
        limits, cgroup = self._job.limits, self._cgroup
        try:
            async with supervised(
                pipes.read_ends, max_output_bytes=limits.max_output_bytes, kill=self._kill
            ) as watcher:
                await watcher.watch(
                    self._exited,
                    started=started,
                    wall_time_s=limits.wall_time_s,
                    cpu_time_s=limits.cpu_time_s,
                    cgroup=cgroup,
                )
                ended = time.monotonic()
                body = self._exited.result()
                at = body.get("at")
                if isinstance(at, int | float) and began_at <= at <= ended:
                    ended = at  # when the zygote saw the run end, not when we got round to it
                if "error" in body:
                    raise SandboxSetupFailed(body["error"])
                if cgroup is not None:
                    # Its PID 1 killed and reaped every other process before reporting
                    # (or, killed itself, took them with it): one pass, not a wait.
                    cgroup.kill(until_empty=False)
                await watcher.drain()
        finally:
            self._zygote.pending.pop(self._run_id, None)
        outcome = outcome_of(
            watcher,
            wait_status=body["status"],
            wall_time_s=ended - began_at,
            cgroup=cgroup,
            rusage_cpu_s=body["cpu_s"],
            rusage_peak_bytes=max(body["maxrss_kb"] * 1024, body.get("peak_bytes", 0)),
        )
        return dataclasses.replace(
            outcome,
            killed_for=outcome.killed_for or body.get("killed_for"),  # the zygote's sampling
            processes_started=body.get("processes"),
            bytes_written=body.get("written"),
        )

    def result(self, outcome: ProcessOutcome) -> RunResult:
        """The :class:`RunResult` of ``outcome``, with how each limit was enforced."""
        self.how["reclaim"] = "pid namespace per run, forked from the warm pool's zygote"
        return interpret(
            outcome,
            isolation="bwrap",
            enforcement=self.how,
            shifted_signals=True,
            memory_bytes=self._job.limits.memory_bytes,
        )
