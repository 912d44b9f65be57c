"""Runs a program's compile and run steps *inside* the sandbox and reports each one.

Started by :mod:`execgym.server.programs` as ``python -I -S steps.py SPEC_JSON`` in the
sandbox; standard library only. Each step runs in its own process group with its own
timeout; its output goes to files under ``/tmp`` (bounded by the sandbox's file-size
and disk limits) of which the first ``output_cap`` bytes are kept. The run step reads
the sandbox's stdin; the compile step reads nothing. When a step fails the rest are
skipped. The report (JSON) goes to fd 3, which no step inherits, and lists each step
and the requested files (base64, ``null`` when absent or too large).

Spec: ``{"steps": [{"name", "argv", "timeout_s"}], "output_cap", "fetch", "fetch_cap",
"to_tmp"}``; ``to_tmp`` names files (relative to ``/tmp``) the request put under ``/tmp``:
they arrive in the work dir's ``.execgym-tmp/`` and are moved to ``/tmp`` before any step.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

REPORT_FD = 3
OUT_DIR = "/tmp/.execgym-steps"
STAGING = ".execgym-tmp"


def _no_dumping() -> None:
    # Steps run under our uid: keep them out of /proc/<our pid>/fd (the report pipe).
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass


def _read_head(path: str, cap: int) -> tuple[str, bool]:
    with open(path, "rb") as handle:
        data = handle.read(cap + 1)
    return base64.b64encode(data[:cap]).decode(), len(data) > cap


def _wait(pid: int, deadline: float) -> tuple[int, object, bool]:
    pause = 0.001
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            return status, usage, False
        if time.monotonic() >= deadline:
            _kill_group(pid)
            _, status, usage = os.wait4(pid, 0)
            return status, usage, True
        time.sleep(pause)
        pause = min(pause * 2, 0.01)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)


def run_step(step: dict, index: int, output_cap: int, stdin: object) -> dict:
    """Run one step to its end or its timeout and describe what happened."""
    out = os.path.join(OUT_DIR, f"{index}.out")
    err = os.path.join(OUT_DIR, f"{index}.err")
    started = time.monotonic()
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        try:
            proc = subprocess.Popen(
                step["argv"], stdin=stdin, stdout=stdout, stderr=stderr, start_new_session=True
            )
        except OSError as error:
            return {"name": step["name"], "spawn_error": f"{type(error).__name__}: {error}"}
        status, usage, timed_out = _wait(proc.pid, started + step["timeout_s"])
        proc.returncode = -1  # reaped by wait4 above; keep Popen from waiting again
    wall = time.monotonic() - started
    _kill_group(proc.pid)  # background processes of a finished step die with it
    report = {
        "name": step["name"],
        "timed_out": timed_out,
        "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "wall_time_s": wall,
        "cpu_time_s": usage.ru_utime + usage.ru_stime,
        "peak_memory_bytes": usage.ru_maxrss * 1024,
    }
    report["stdout"], report["stdout_truncated"] = _read_head(out, output_cap)
    report["stderr"], report["stderr_truncated"] = _read_head(err, output_cap)
    return report


def fetch(paths: list, cap: int) -> dict:
    """Read the requested files (relative to the work dir), base64; ``None`` if unreadable."""
    files = {}
    for path in paths:
        try:
            if os.path.getsize(path) > cap:
                files[path] = None
                continue
            with open(path, "rb") as handle:
                files[path] = base64.b64encode(handle.read()).decode()
        except OSError:
            files[path] = None
    return files


def move_to_tmp(names: list) -> None:
    """Move the request's files for ``/tmp`` there from the work dir's staging folder."""
    for name in names:
        target = os.path.join("/tmp", name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.move(os.path.join(STAGING, name), target)
    shutil.rmtree(STAGING, ignore_errors=True)


def _ignore_signals() -> None:
    # Steps run under our uid and may signal us: SIGINT ended this runner (Python's
    # KeyboardInterrupt) before its report. A handler, not SIG_IGN, so that every step
    # starts with the default dispositions again (exec resets handled signals, not
    # ignored ones). SIGKILL and SIGSTOP cannot be caught: the run then has no report,
    # which is a runtime error, never a pass.
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM"):
        signal.signal(getattr(signal, name), lambda number, frame: None)


def main() -> None:
    """Run the spec in ``sys.argv[1]`` and write the report to fd 3."""
    _ignore_signals()
    _no_dumping()
    spec = json.loads(sys.argv[1])
    report_pipe = os.fdopen(REPORT_FD, "w")
    os.set_inheritable(REPORT_FD, False)
    os.makedirs(OUT_DIR, exist_ok=True)
    move_to_tmp(spec.get("to_tmp", []))
    steps = []
    for index, step in enumerate(spec["steps"]):
        stdin = 0 if step["name"] == "run" else subprocess.DEVNULL
        result = run_step(step, index, spec["output_cap"], stdin)
        steps.append(result)
        if "spawn_error" in result or result["timed_out"] or result["exit_code"] != 0:
            break
    files = fetch(spec["fetch"], spec["fetch_cap"])
    report_pipe.write(json.dumps({"steps": steps, "files": files}))
    report_pipe.close()


if __name__ == "__main__":
    main()
