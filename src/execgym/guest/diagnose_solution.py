"""The solution's process of the diagnostics harness: loads the program, runs the phases.

See :mod:`execgym.guest.diagnose` for the protocol. Standard library only.
"""

import copy
import json
import os
import sys
import time

from .diagnose_common import SOLUTION, TESTS, answer_hash, model_frame
from .diagnose_leaks import LeakPhases


class Child(LeakPhases):
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
