"""The diagnostics harness, run INSIDE the sandbox: leaks, hot spots and run-time growth.

Standard library only, never imported by the host: it sends the bundle ``diagnose``
(``diagnose_common``, ``diagnose_leaks``, ``diagnose_solution``, then this module)
into the sandbox, see :mod:`execgym.diagnostics.python`.

Protocol:

1. It writes ``START_MARKER`` to fd 3 (the report channel) before any untrusted code
   exists, and makes itself non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``), so the
   solution, running as the same uid, cannot open its ``/proc/<pid>/fd/3`` or memory.
2. stdin holds the job in two parts, each a 10-digit length then that many bytes. Part
   one is a JSON object: ``program`` (the solution's source, run as ``solution.py``),
   ``entry`` (the function to call), ``tests`` (the task's ``check(candidate)`` source,
   or ``null``), ``cases`` (``[[args, kwargs], ...]``, or ``null``), ``checks``
   (``leaks``, ``hotspots``, ``complexity``), ``half_calls`` (calls per half of the
   leak phase, at least), ``budget_s`` (wall seconds for the whole run), ``profile_s``
   (seconds per profiling pass), ``sizes`` and ``inputs`` (the task's input generator
   source, defining ``make_input(n)``). Part two is the nonce. The harness builds the
   inputs of every size from the task's generator *before* the solution exists, then
   forks the **solution process** (stdin ``/dev/null``, no fd 3), and only then reads
   part two.
3. The solution process runs the program, finds the entry point, and does the phases
   the job asks for, telling the harness about each step on a pipe:

   - *leaks*: warm-up passes over the task's inputs (a pass is ``check(candidate)``
     or one call per case), then two halves of ``K`` passes each under ``tracemalloc``
     (10 frames; ``K`` covers at least ``half_calls`` calls, as far as 50 % of the
     budget allows, at least 2 passes), with a ``gc.collect()`` and a snapshot after
     the warm-up and after each half. At those three points the harness, outside the
     solution's process, counts its open descriptors (``/proc/PID/fd``), threads
     (``/proc/PID/task``), child processes (``/proc/PID/task/*/children``, zombies
     included) and resident memory (``VmRSS``). Traced bytes are attributed to the
     innermost frame of ``solution.py`` in each allocation's traceback; new
     descriptors, threads and processes to the line of ``solution.py`` that made them
     (audit hooks on ``open``, ``socket.__new__``, ``os.fork``, ``subprocess.Popen``...,
     and the allocation tracebacks of ``threading.Thread`` and file objects). Then
     ``K`` passes with the cycle collector off count the instances of the solution's
     classes with a ``__del__`` that only a collection frees (reference cycles).
   - *hotspots*: passes under ``cProfile`` for ``profile_s`` (functions: self time
     plus the builtins they call directly), then passes under a ``SIGPROF`` sampler
     (1 ms of CPU) for ``profile_s`` (lines: the innermost ``solution.py`` frame).
   - *complexity*: for each size, the harness asks for ``reps`` calls of the entry
     point with that size's input and times them itself, from its go to the answer:
     the CPU time of the solution process's threads (``/proc/PID/task/*/schedstat``,
     in ns, which other processes' load does not inflate), the wall clock where the
     kernel keeps no schedstat; ``reps`` doubles until a measurement takes 20 ms, and
     each size's time is the least of three measurements. The solution process answers with a
     SHA-256 of the result in a canonical form, which the host compares with the
     reference's.
4. It writes one report to fd 3: the nonce on a line, then a JSON object
   ``{"status": "ok" | "error", "phases": {...}, "error": ..., "partial": ...}``.

What the solution controls: everything its own process says (traced bytes, profile
figures, answers). What it does not: the harness's counts of its descriptors,
threads, processes and memory, the clock of the complexity phase, and the inputs.
"""

import json
import os
import select
import sys
import time

from .diagnose_common import (
    START_MARKER,
    TIMED_MAX_REPS,
    TIMED_MIN_S,
    TIMED_REPEATS,
    make_inputs,
    no_dump,
    read_part,
)
from .diagnose_solution import child_main


def count_dir(path):
    try:
        return len(os.listdir(path))
    except OSError:
        return None


def children_of(pid):
    total = 0
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, tid)) as handle:
                total += len(handle.read().split())
    except OSError:
        return None
    return total


def rss_bytes(pid):
    try:
        with open("/proc/%d/status" % pid) as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def cpu_ns(pid):
    """Nanoseconds the process's threads have run on a CPU (``/proc/PID/task/*/schedstat``).

    Unlike the wall clock, other processes' load does not inflate it. ``None`` where
    the kernel does not keep it.
    """
    total = 0
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as handle:
                total += int(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return total


def sample(pid):
    return {
        "fds": count_dir("/proc/%d/fd" % pid),
        "threads": count_dir("/proc/%d/task" % pid),
        "processes": children_of(pid),
        "rss": rss_bytes(pid),
    }


class Harness:
    """Reads the solution process's events, measures it from outside, writes the report."""

    def __init__(self, pid, commands, answers, deadline):
        self.pid = pid
        self.commands = commands
        self.answers = answers
        self.deadline = deadline
        self.buffer = b""
        self.phases = {}
        self.samples = []

    def event(self):
        while b"\n" not in self.buffer:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the diagnostics ran out of their time budget")
            ready, _, _ = select.select([self.answers], [], [], left)
            if not ready:
                continue
            chunk = os.read(self.answers, 1 << 16)
            if not chunk:
                raise EOFError("the solution's process ended before the diagnostics did")
            self.buffer += chunk
            if len(self.buffer) > 8 << 20:
                raise ValueError("the solution's process sent too much")
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def command(self, text):
        os.write(self.commands, text.encode() + b"\n")

    def run(self, sizes):
        while True:
            event = self.event()
            kind = event.get("ev")
            if kind == "pass":
                self.samples.append({"calls": event["calls"], **sample(self.pid)})
                os.write(self.commands, b"k")
            elif kind == "loaded":
                self.phases["loaded"] = event
            elif kind == "traced":
                event["samples"] = self.samples
                self.phases["leaks"] = event
            elif kind == "cycles":
                self.phases["cycles"] = event
            elif kind == "hotspots":
                self.phases["hotspots"] = event
            elif kind == "timing":
                self.phases["complexity"] = self.time_sizes(sizes)
            elif kind == "error":
                self.phases["error"] = event
                return
            elif kind == "done":
                return

    def timed(self, index, reps):
        """(wall seconds of ``reps`` calls on input ``index``, answer hash, error)."""
        self.command("%d %d" % (index, reps))
        if self.event().get("ev") != "ready":
            raise ValueError("the solution's process broke the timing protocol")
        start, cpu_start = time.perf_counter(), cpu_ns(self.pid)
        os.write(self.commands, b"g")
        timed = self.event()
        elapsed, cpu_end = time.perf_counter() - start, cpu_ns(self.pid)
        if cpu_start is not None and cpu_end is not None and cpu_end > cpu_start:
            elapsed = (cpu_end - cpu_start) / 1e9
        answer = self.event()
        if timed.get("ev") != "timed" or answer.get("ev") != "answer":
            raise ValueError("the solution's process broke the timing protocol")
        return elapsed, answer.get("answer"), answer.get("error")

    def time_sizes(self, sizes):
        rows = []
        for index, n in enumerate(sizes):
            reps, best, answer, error = 1, None, None, None
            while True:
                elapsed, answer, error = self.timed(index, reps)
                if error or elapsed >= TIMED_MIN_S or reps >= TIMED_MAX_REPS:
                    break
                reps *= 2
            best = elapsed
            for _ in range(TIMED_REPEATS - 1):
                if error:
                    break
                best = min(best, self.timed(index, reps)[0])
            rows.append({"n": n, "seconds": best / reps, "reps": reps, "answer": answer,
                         "error": error})  # fmt: skip
            if error:
                break
        self.command("end")
        return rows


def main():
    report = os.fdopen(3, "wb", buffering=0)
    report.write(START_MARKER)
    no_dump()
    job = json.loads(read_part(sys.stdin.buffer))
    started = time.monotonic()
    try:
        inputs = make_inputs(job)
    except Exception as error:
        inputs, job["inputs_error"] = [], "%s: %s" % (type(error).__name__, error)
    commands_r, commands_w = os.pipe()
    answers_r, answers_w = os.pipe()
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        os.close(commands_w)
        os.close(answers_r)
        child_main(job, inputs, commands_r, answers_w)
    os.close(commands_r)
    os.close(answers_w)
    nonce = read_part(sys.stdin.buffer).decode().strip()
    harness = Harness(pid, commands_w, answers_r, started + float(job["budget_s"]))
    status, problem = "ok", None
    try:
        harness.run([n for n, _, _ in inputs])
    except Exception as error:
        status, problem = "error", "%s: %s" % (type(error).__name__, error)
    try:
        os.kill(pid, 9)
    except OSError:
        pass
    os.waitpid(pid, 0)
    payload = {"status": status, "problem": problem, "phases": harness.phases,
               "inputs_error": job.get("inputs_error")}  # fmt: skip
    report.write(nonce.encode() + b"\n" + json.dumps(payload).encode() + b"\n")
    report.flush()
    os._exit(0)


main()
