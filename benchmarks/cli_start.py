"""The command line's fixed cost: ``execgym score`` of one rollout, end to end (issue 23).

Interleaved runs (minimum and median of ``--runs``): the interpreter alone, importing
``execgym.cli`` (the group; each command's module is imported when it runs), ``execgym
score --help`` (the group and the score command), and scoring one trivial rollout with
the warm pool (interpreter start, imports, loading, the pool's start, the self-test,
the rollout, the summary). Target:
the last under 0.3 s. ``PYTHONDONTWRITEBYTECODE`` is unset for the runs, as on a normal
install (with it, every run compiles execgym's sources again).

    .venv/bin/python benchmarks/cli_start.py [--runs 7] [--old-src PATH]

``--old-src`` adds the same rows for another checkout's ``src`` (run with
``PYTHONPATH``), to compare in one run. Each row also shows the CPU time the command
used (user + system, with the children it reaped: ``RUSAGE_CHILDREN``), which a machine
shared with other jobs inflates far less than the wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TASK = {
    "task_id": "t/1",
    "prompt": "def f():\n",
    "entry_point": "f",
    "tests": "def check(candidate):\n    assert candidate() == 1\n",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--old-src", default=None)
    args = parser.parse_args()
    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "tasks.jsonl").write_text(json.dumps(TASK) + "\n")
        rollout = {"task_id": "t/1", "completion": "    return 1\n"}
        (folder / "rollouts.jsonl").write_text(json.dumps(rollout) + "\n")
        score = ["-m", "execgym", "score", str(folder / "tasks.jsonl")]
        score += [str(folder / "rollouts.jsonl"), "-o", str(folder / "out.jsonl")]
        commands: dict[str, tuple[list[str], dict[str, str]]] = {
            "python -c pass": ([sys.executable, "-c", "pass"], {}),
            "import execgym.cli": ([sys.executable, "-c", "import execgym.cli"], {}),
            "execgym score --help": ([sys.executable, "-m", "execgym", "score", "--help"], {}),
            "execgym score, 1 rollout": ([sys.executable, *score], {}),
        }
        if args.old_src:
            old = {"PYTHONPATH": args.old_src}
            commands["old: import execgym.cli"] = (commands["import execgym.cli"][0], old)
            commands["old: execgym score --help"] = (commands["execgym score --help"][0], old)
            commands["old: execgym score, 1 rollout"] = (
                commands["execgym score, 1 rollout"][0],
                old,
            )
        for argv, extra in commands.values():  # bytecode written, caches warm
            subprocess.run(argv, env={**base, **extra}, capture_output=True, check=True)
        times: dict[str, list[float]] = {name: [] for name in commands}
        cpus: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.runs):
            for name, (argv, extra) in commands.items():
                before = _children_cpu_s()
                started = time.perf_counter()
                subprocess.run(argv, env={**base, **extra}, capture_output=True, check=True)
                times[name].append(time.perf_counter() - started)
                cpus[name].append(_children_cpu_s() - before)
    print(
        f"seconds, {args.runs} interleaved runs each: wall, and CPU (user + system of the "
        "command and what it reaped)"
    )
    for name, values in times.items():
        print(
            f"{name:<32} wall min {min(values):.3f}  median {statistics.median(values):.3f}"
            f"   CPU min {min(cpus[name]):.3f}  median {statistics.median(cpus[name]):.3f}"
        )
    print("target: execgym score, 1 rollout under 0.3 s of wall time")


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    main()
