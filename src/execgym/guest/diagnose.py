"""The diagnostics harness, run INSIDE the sandbox: leaks, hot spots and run-time growth.

Standard library only, one file, never imported by the host (it reads this text and
sends it into the sandbox, see :mod:`execgym.diagnostics.python`).

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

import copy
import gc
import hashlib
import json
import os
import select
import sys
import time

START_MARKER = b"EXECGYM-START\n"
SOLUTION = "solution.py"
TESTS = "<tests>"
WARMUP_PASSES = 2
MIN_HALF_PASSES = 2
MAX_HALF_PASSES = 64
TIMED_MIN_S = 0.02
TIMED_MAX_REPS = 1 << 16
TIMED_REPEATS = 3
FRAMES = 10
LEAK_SHARE = 0.5
TRACE_SLOWDOWN = 30  # tracemalloc's cost on allocation-heavy code, at most (measured ~20x)
BLOCK_NOISE = 8  # blocks the measuring itself keeps (its tuples and ints)


def read_part(stream):
    """One length-prefixed part of stdin."""
    size = int(stream.read(10) or b"0")
    return stream.read(size)


def no_dump():
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except Exception:
        pass


def make_inputs(job):
    """``[(n, args, kwargs), ...]`` from the task's generator, seeded per size."""
    if "complexity" not in job["checks"] or not job.get("sizes"):
        return []
    import random

    space = {"__name__": "execgym_inputs"}
    exec(compile(job["inputs"], "<inputs>", "exec"), space)  # the task's own code
    made = []
    for n in job["sizes"]:
        random.seed(n)
        value = space["make_input"](n)
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], dict):
            made.append((n, list(value[0]), value[1]))
        else:
            made.append((n, list(value), {}))
    return made


# ---------------------------------------------------------------- the solution's side


def canonical(value, depth=0):
    """A JSON-able form of ``value`` that does not depend on hash seeds or identity."""
    if depth > 50:
        return "<deep>"
    if isinstance(value, bool) or value is None or isinstance(value, int | str):
        return value
    if isinstance(value, float):
        return float("%.9g" % value)
    if isinstance(value, list | tuple):
        return [canonical(v, depth + 1) for v in value]
    if isinstance(value, set | frozenset):
        items = [canonical(v, depth + 1) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, dict):
        pairs = [[canonical(k, depth + 1), canonical(v, depth + 1)] for k, v in value.items()]
        return sorted(pairs, key=lambda p: json.dumps(p, sort_keys=True))
    return type(value).__name__


def answer_hash(value):
    text = json.dumps(canonical(value), sort_keys=True)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


_MALLINFO = []


class OutOfBudget(BaseException):
    """Raised by the harness's timer in the solution's process: a phase ran out of time."""


def heap_size():
    """(pymalloc blocks in use, bytes malloc holds for the program), ``None`` if unknown.

    Small objects live in pymalloc's blocks (``sys.getallocatedblocks``); larger ones
    (big strings, list buffers) in malloc's, whose in-use bytes glibc's ``mallinfo2``
    gives (``uordblks + hblkhd``). The ctypes function is made once, at the first call
    (a warm-up), so measuring allocates nothing that stays.
    """
    if not _MALLINFO:
        try:
            import ctypes

            class Info(ctypes.Structure):
                _fields_ = [(name, ctypes.c_size_t) for name in (
                    "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                    "uordblks", "fordblks", "keepcost")]  # fmt: skip

            function = ctypes.CDLL(None).mallinfo2
            function.restype = Info
            _MALLINFO.append(function)
        except Exception:
            _MALLINFO.append(None)
    blocks = sys.getallocatedblocks()
    if _MALLINFO[0] is None:
        return blocks, None
    info = _MALLINFO[0]()
    return blocks, info.uordblks + info.hblkhd


def model_frame(frame):
    """The innermost frame of the solution's file at or above ``frame``, else ``None``."""
    while frame is not None:
        if frame.f_code.co_filename == SOLUTION:
            return frame
        frame = frame.f_back
    return None


class Child:
    """The solution process: loads the program and runs the phases."""

    def __init__(self, job, inputs, commands, answers):
        self.job = job
        self.inputs = inputs
        self.commands = commands
        self.answers = answers
        self.calls = 0
        self.opened = {}  # what -> line of solution.py that opened/started it last
        self.space = None
        self.entry = None
        self.check = None
        self.mutates = {}  # complexity: input index -> whether a call changes its arguments

    def send(self, **event):
        data = (json.dumps(event) + "\n").encode()
        while data:
            data = data[os.write(self.answers, data) :]

    def wait_ack(self):
        return os.read(self.commands, 64)

    def audit(self, event, args):
        if event not in (
            "open",
            "socket.__new__",
            "os.fork",
            "os.forkpty",
            "os.posix_spawn",
            "os.system",
            "subprocess.Popen",
            "_thread.start_new_thread",
        ):
            return
        frame = model_frame(sys._getframe(1))
        if frame is None:
            return
        where = [frame.f_code.co_name, frame.f_lineno]
        if event == "open" and args and isinstance(args[0], str | bytes | int):
            key = "path:" + os.fsdecode(args[0]) if not isinstance(args[0], int) else "fd"
            self.opened[key] = where
        elif event == "socket.__new__":
            self.opened["socket"] = where
        elif event == "_thread.start_new_thread":
            self.opened["thread"] = where
        else:
            self.opened["process"] = where

    def load(self):
        sys.addaudithook(self.audit)
        real_pipe = os.pipe  # no audit event for it: the caller's line is kept here

        def pipe():
            frame = model_frame(sys._getframe(1))
            if frame is not None:
                self.opened["pipe"] = [frame.f_code.co_name, frame.f_lineno]
            return real_pipe()

        os.pipe = pipe
        import threading

        real_start = threading.Thread.start

        def start(thread):
            frame = model_frame(sys._getframe(1))
            thread.execgym_line = frame.f_lineno if frame is not None else None
            return real_start(thread)

        threading.Thread.start = start
        space = {"__name__": "solution", "__file__": SOLUTION, "__builtins__": __builtins__}
        module = type(sys)("solution")
        module.__dict__.update(space)
        sys.modules["solution"] = module
        exec(compile(self.job["program"], SOLUTION, "exec", dont_inherit=True), module.__dict__)
        self.space = module.__dict__
        entry = self.job["entry"]
        target = self.space.get(entry)
        if target is None and "Solution" in self.space:
            target = getattr(self.space["Solution"](), entry.split(".")[-1], None)
        if not callable(target):
            raise LookupError("the entry point %r is not defined" % entry)
        self.entry = target
        if self.job.get("tests"):
            tests = {"__name__": "execgym_tests"}
            tests.update({k: v for k, v in self.space.items() if not k.startswith("__")})
            exec(compile(self.job["tests"], TESTS, "exec", dont_inherit=True), tests)
            self.check = tests.get("check")

    def candidate(self, *args, **kwargs):
        self.calls += 1
        return self.entry(*args, **kwargs)

    def one_pass(self):
        """The task's inputs once; a failing assertion or exception does not stop it."""
        if self.check is not None:
            try:
                self.check(self.candidate)
            except Exception:
                pass
            return
        for args, kwargs in self.job.get("cases") or []:
            try:
                self.candidate(*args, **kwargs)
            except Exception:
                pass

    def run(self):
        self.load()
        start = time.perf_counter()  # wall: the harness's deadline is wall time
        self.one_pass()
        pass_s = time.perf_counter() - start
        per_pass = max(1, self.calls)
        self.send(ev="loaded", calls_per_pass=per_pass, first_pass_s=pass_s)
        checks = self.job["checks"]
        if "leaks" in checks:
            self.leaks(per_pass, pass_s)
        if "hotspots" in checks:
            self.hotspots()
        if "complexity" in checks and self.inputs:
            self.complexity()
        self.send(ev="done")

    # --- leaks

    def leaks(self, per_pass, pass_s):
        """Screen untraced (descriptors, threads, processes, heap size); trace if it grew."""
        wanted = -(-int(self.job.get("half_calls", 32)) // per_pass)
        budget = LEAK_SHARE * float(self.job["budget_s"])
        half = max(
            MIN_HALF_PASSES, min(MAX_HALF_PASSES, wanted, int(budget / 4 / max(pass_s, 1e-6)))
        )
        for _ in range(WARMUP_PASSES - 1):
            self.one_pass()
        gc.collect()
        self.fds0 = set(os.listdir("/proc/self/fd"))
        threads0 = self.thread_map()
        heap_size()
        gc.collect()
        heaps = [None, None, None]
        heaps[0] = heap_size()
        self.point()
        for h in (1, 2):
            for _ in range(half):
                self.one_pass()
            gc.collect()
            heaps[h] = heap_size()
            self.point()
        # Lenient: any growth over the two halves is traced, which decides (a growing
        # string is resized in place and may show in one half only).
        blocks, malloc_bytes = (list(column) for column in zip(*heaps, strict=False))
        grew = blocks[2] - blocks[0] > BLOCK_NOISE or (
            None not in malloc_bytes and malloc_bytes[2] > malloc_bytes[0]
        )
        lines, traced_calls = [], 0
        if grew and pass_s * TRACE_SLOWDOWN * (1 + 2 * MIN_HALF_PASSES) > budget / 2:
            lines = None  # tracing would not fit in the budget: said in the report
        elif grew:
            lines, traced_calls = self.traced(half, budget / 2)
        threads = self.thread_map()
        self.send(
            ev="traced",
            half_passes=half,
            heap=heaps,
            traced=grew if lines is not None else "skipped: a traced pass is too slow",
            traced_calls=traced_calls,
            lines=lines or [],
            handles=self.handle_lines(),
            threads=[line for key, line in threads.items() if key not in threads0],
            opened=self.opened,
        )
        self.cycles(half)

    def point(self):
        """One measuring point: the harness counts this process from outside, then acks."""
        self.send(ev="pass", calls=self.calls)
        self.wait_ack()

    def traced(self, half, budget):
        """Per line of solution.py, traced bytes after a warm-up pass and two halves.

        ``(None, 0)`` when it does not fit in ``budget`` wall seconds (a timer stops it).
        """
        import signal
        import tracemalloc

        def stop(_signum, _frame):
            raise OutOfBudget

        old = signal.signal(signal.SIGALRM, stop)
        signal.setitimer(signal.ITIMER_REAL, budget)
        tracemalloc.start(FRAMES)
        try:
            start = time.perf_counter()  # wall: the harness's deadline is wall time
            self.one_pass()
            traced_s = time.perf_counter() - start
            half = min(half, int(budget / 2 / max(traced_s, 1e-6)))
            if half < MIN_HALF_PASSES:  # too slow to trace within the budget: say so
                return None, 0
            gc.collect()
            snapshots = [tracemalloc.take_snapshot()]
            before = self.calls
            for _ in range(2):
                for _ in range(half):
                    self.one_pass()
                gc.collect()
                snapshots.append(tracemalloc.take_snapshot())
            signal.setitimer(signal.ITIMER_REAL, 0)
            return self.traced_growth(snapshots), self.calls - before
        except OutOfBudget:
            return None, 0
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
            tracemalloc.stop()

    def traced_growth(self, snapshots):
        """Per line of solution.py: traced bytes and blocks at each snapshot."""
        table = {}
        for index, snapshot in enumerate(snapshots):
            for trace in snapshot.traces:
                frame = next((f for f in trace.traceback if f.filename == SOLUTION), None)
                if frame is None:
                    continue
                row = table.setdefault(frame.lineno, [[0, 0] for _ in snapshots])
                row[index][0] += trace.size
                row[index][1] += 1
        lines = self.job["program"].splitlines()
        out = []
        for lineno, row in table.items():
            if row[-1][0] - row[0][0] <= 0:
                continue
            text = lines[lineno - 1].strip()[:120] if 0 < lineno <= len(lines) else ""
            out.append({"line": lineno, "code": text, "bytes": [r[0] for r in row],
                        "blocks": [r[1] for r in row]})  # fmt: skip
        out.sort(key=lambda r: r["bytes"][0] - r["bytes"][-1])
        return out[:20]

    def thread_map(self):
        """id -> the line of solution.py its target starts at, for each running thread."""
        import threading

        found = {}
        for thread in threading.enumerate():
            if thread is threading.main_thread():
                continue
            line = getattr(thread, "execgym_line", None)
            if line is None:  # started elsewhere: the line its target starts at
                code = getattr(getattr(thread, "_target", None), "__code__", None)
                line = code.co_firstlineno if code and code.co_filename == SOLUTION else None
            found[id(thread)] = line
        return found

    def handle_lines(self):
        """fd number -> [what it is, line] for each open descriptor, where known."""
        import tracemalloc

        by_fd = {}
        for fd in set(os.listdir("/proc/self/fd")) - self.fds0:
            try:
                target = os.readlink("/proc/self/fd/" + fd)
            except OSError:
                continue
            kind = target.split(":", 1)[0] if ":[" in target else "file"
            where = self.opened.get("path:" + target) or self.opened.get(kind)
            by_fd[fd] = [kind, target[:200], where[1] if where else None]
        for obj in gc.get_objects():  # file and socket objects: their allocation's line
            fileno = getattr(type(obj), "fileno", None)
            if fileno is None or not hasattr(obj, "close"):
                continue
            try:
                fd = str(obj.fileno())
            except Exception:
                continue
            tb = tracemalloc.get_object_traceback(obj) if tracemalloc.is_tracing() else None
            frame = next((f for f in tb or () if f.filename == SOLUTION), None)
            if fd in by_fd and frame is not None:
                by_fd[fd][2] = frame.lineno
        return by_fd

    def cycles(self, passes):
        """Objects of the solution's classes with ``__del__`` that only the cycle GC frees.

        With the collector off, the passes run; the instances alive before a collection
        and gone after it were in reference cycles (whatever their ``__del__`` does).
        """

        def census():
            found = {}
            for obj in gc.get_objects():
                cls = type(obj)
                if getattr(cls, "__module__", "") == "solution" and "__del__" in dir(cls):
                    found[cls.__name__] = found.get(cls.__name__, 0) + 1
            return found

        gc.collect()
        gc.disable()
        try:
            before = self.calls
            for _ in range(passes):
                self.one_pass()
            alive = census()
            gc.collect()
            after = census()
        finally:
            gc.enable()
        rows = [
            {"class": name, "objects": count - after.get(name, 0)}
            for name, count in alive.items()
            if count > after.get(name, 0)
        ]
        self.send(ev="cycles", calls=self.calls - before, rows=rows)

    # --- hot spots

    def hotspots(self):
        import cProfile
        import pstats

        budget = float(self.job.get("profile_s", 0.05))
        profile = cProfile.Profile()
        start, passes = time.process_time(), 0
        profile.enable()
        while passes < 1 or (time.process_time() - start < budget and passes < 10000):
            self.one_pass()
            passes += 1
        profile.disable()
        stats = pstats.Stats(profile).stats
        total = sum(row[2] for row in stats.values()) or 1e-12
        own = {}
        for (filename, line, name), (_cc, calls, tottime, cumtime, callers) in stats.items():
            if filename == SOLUTION:
                entry = own.setdefault((name, line), [0.0, cumtime, calls])
                entry[0] += tottime
            elif filename == "~":  # a builtin: its time is its callers'
                for (cfile, cline, cname), caller in callers.items():
                    if cfile == SOLUTION:
                        entry = own.setdefault((cname, cline), [0.0, 0.0, 0])
                        entry[0] += caller[2]
        functions = [
            {
                "function": name,
                "line": line,
                "self_share": t / total,
                "cum_share": c / total,
                "calls": n,
            }
            for (name, line), (t, c, n) in own.items()
        ]
        functions.sort(key=lambda f: -f["self_share"])
        lines = self.sample_lines(budget)
        self.send(ev="hotspots", passes=passes, profiled_s=total, functions=functions[:10],
                  lines=lines)  # fmt: skip

    def sample_lines(self, budget):
        import signal

        counts, outside = {}, [0]

        def sample(_signum, frame):
            found = model_frame(frame)
            if found is None:
                outside[0] += 1
                return
            key = (found.f_code.co_name, found.f_lineno)
            counts[key] = counts.get(key, 0) + 1

        old = signal.signal(signal.SIGPROF, sample)
        signal.setitimer(signal.ITIMER_PROF, 0.001, 0.001)
        start, passes = time.process_time(), 0  # CPU seconds: what SIGPROF counts
        try:
            while passes < 1 or (time.process_time() - start < budget and passes < 10000):
                self.one_pass()
                passes += 1
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0, 0)
            signal.signal(signal.SIGPROF, old)
        total = sum(counts.values()) + outside[0]
        source = self.job["program"].splitlines()
        rows = [
            {"function": k[0], "line": k[1], "samples": v, "share": v / total,
             "code": source[k[1] - 1].strip()[:120] if 0 < k[1] <= len(source) else ""}
            for k, v in counts.items()
        ]  # fmt: skip
        rows.sort(key=lambda r: -r["samples"])
        return {"samples": total, "outside": outside[0], "top": rows[:10]}

    # --- complexity

    def complexity(self):
        self.send(ev="timing")
        buffer = b""
        while True:
            while b"\n" not in buffer:
                chunk = os.read(self.commands, 4096)
                if not chunk:
                    return
                buffer += chunk
            line, buffer = buffer.split(b"\n", 1)
            if line == b"end":
                return
            index, reps = (int(x) for x in line.split())
            _, args, kwargs = self.inputs[index]
            # Fresh copies for every call if the first call changed its arguments in
            # place (made before the harness starts its clock, "ready"); else one.
            if index not in self.mutates:
                trial = copy.deepcopy((args, kwargs))
                try:
                    self.entry(*trial[0], **trial[1])
                except Exception:
                    pass
                self.mutates[index] = trial != (args, kwargs)
            if self.mutates[index]:
                calls = [copy.deepcopy((args, kwargs)) for _ in range(reps)]
            else:
                calls = [copy.deepcopy((args, kwargs))] * reps
            self.send(ev="ready")
            if os.read(self.commands, 1) != b"g":
                return
            value, error = None, None
            try:
                for call_args, call_kwargs in calls:
                    value = self.entry(*call_args, **call_kwargs)
            except Exception as exc:
                error = type(exc).__name__ + ": " + str(exc)[:200]
            self.send(ev="timed")
            self.send(ev="answer", answer=answer_hash(value), error=error)


def child_main(job, inputs, commands, answers):
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.close(3)
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # dumpable again: the harness reads its /proc
    except Exception:
        pass
    child = Child(job, inputs, commands, answers)
    try:
        child.run()
    except BaseException as error:
        try:
            child.send(ev="error", type=type(error).__name__, message=str(error)[:500])
        except BaseException:
            pass
    os._exit(0)


# ---------------------------------------------------------------- the harness's side


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
