"""The leak phase of the diagnostics harness, run in the solution's process.

A mixin of :class:`~execgym.guest.diagnose_solution.Child` (see
:mod:`execgym.guest.diagnose` for the protocol): it uses the child's ``one_pass``,
``send``, ``wait_ack``, ``calls``, ``opened`` and ``job``.
"""

import gc
import os
import time

from .diagnose_common import (
    BLOCK_NOISE,
    FRAMES,
    LEAK_SHARE,
    MAX_HALF_PASSES,
    MIN_HALF_PASSES,
    SOLUTION,
    TRACE_SLOWDOWN,
    WARMUP_PASSES,
    OutOfBudget,
    heap_size,
)


class LeakPhases:
    """The leak measurements (descriptors, threads, processes, heap, cycles)."""

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
