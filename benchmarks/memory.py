"""Peak memory of ``execgym score`` as a batch grows: it must stay flat (issue 23).

Runs the real command line (warm pool, bwrap) on a trivial task (``def f(): return 1``,
so a large batch finishes in reasonable time) at each size of ``--sizes``, and on
``--chatty`` rollouts that each print ``--print-bytes`` (1 MiB by default) to stdout,
and prints the peak resident memory (``VmHWM``) of the ``execgym`` process itself
(not of its sandboxes) for each, and its ratio to the smallest batch. The target is
every figure within 20 % of the others.

    .venv/bin/python benchmarks/memory.py [--sizes 10000,100000] [--chatty 1000]
        [--workers 2] [--print-bytes 1048576] [--host-only-sizes 100000,1000000]

``--host-only-sizes`` adds batches whose rollouts name an unknown task: each is scored
``invalid`` on the host without a sandbox, so a million of them runs in a minute or
two and shows the reading, writing and counting alone stay flat.

The peak is read by the process itself at exit (``VmHWM`` of ``/proc/self/status``):
the command runs as ``python -c`` with an ``atexit`` hook around
``execgym.cli.main``, which then behaves exactly as ``execgym score``.
"""

from __future__ import annotations

import argparse
import json
import os
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

_WRAPPER = """
import atexit, os, sys
def _report():
    # VmHWM: this process image's own peak. Not ru_maxrss, which Linux carries over
    # exec from the image that forked it (here the benchmark, holding a 1M-line file).
    with open("/proc/self/status") as status:
        peak = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    with open(os.environ["EXECGYM_BENCH_RSS"], "w") as sink:
        sink.write(peak)
atexit.register(_report)
from execgym.cli import main
sys.argv = ["execgym", *sys.argv[1:]]
main()
"""


def write_inputs(folder: Path, count: int, completion: str, name: str) -> tuple[Path, Path]:
    tasks = folder / "tasks.jsonl"
    tasks.write_text(json.dumps(TASK) + "\n")
    rollouts = folder / f"{name}.jsonl"
    line = json.dumps({"task_id": "t/1", "completion": completion}) + "\n"
    with rollouts.open("w") as sink:
        for _ in range(count):
            sink.write(line)
    return tasks, rollouts


def peak_rss(tasks: Path, rollouts: Path, workers: int, folder: Path) -> tuple[float, float, str]:
    """``(peak RSS in MiB, wall seconds, the summary's verdict line)`` of one CLI run."""
    report = folder / "rss"
    report.unlink(missing_ok=True)  # a run that does not report must not read the last one's
    out = folder / "results.jsonl"
    env = {**os.environ, "EXECGYM_BENCH_RSS": str(report)}
    argv = [sys.executable, "-c", _WRAPPER, "score", str(tasks), str(rollouts), "-o", str(out)]
    argv += ["--workers", str(workers), "--k", "1"]
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"execgym score failed ({done.returncode}): {done.stderr[-2000:]}")
    lines = sum(1 for _ in out.open("rb"))
    verdicts = done.stdout.splitlines()[0]
    return int(report.read_text()) / 1024, elapsed, f"{lines} lines; {verdicts}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--chatty", type=int, default=1000)
    parser.add_argument("--print-bytes", type=int, default=1 << 20)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--host-only-sizes",
        default="",
        help="Also batches of this many rollouts of an unknown task (scored invalid on the "
        "host, no sandbox: the reading, writing and counting alone, fast enough for 1M).",
    )
    args = parser.parse_args()
    rows: list[tuple[str, float, float, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for size in (int(part) for part in args.sizes.split(",")):
            tasks, rollouts = write_inputs(folder, size, "    return 1\n", f"trivial{size}")
            rows.append((f"{size} trivial", *peak_rss(tasks, rollouts, args.workers, folder)))
            print(rows[-1], flush=True)
        for size in (int(part) for part in args.host_only_sizes.split(",") if part):
            tasks, rollouts = write_inputs(folder, size, "    return 1\n", f"unknown{size}")
            rollouts.write_text(rollouts.read_text().replace('"t/1"', '"no-such-task"'))
            label = f"{size} host-only (invalid)"
            rows.append((label, *peak_rss(tasks, rollouts, args.workers, folder)))
            print(rows[-1], flush=True)
        if args.chatty:
            # print() adds the newline: the program writes exactly --print-bytes.
            chatty = f"    print('x' * {args.print_bytes - 1})\n    return 1\n"
            tasks, rollouts = write_inputs(folder, args.chatty, chatty, "chatty")
            label = f"{args.chatty} printing {args.print_bytes} B"
            rows.append((label, *peak_rss(tasks, rollouts, args.workers, folder)))
            print(rows[-1], flush=True)
    smallest = min(rss for _, rss, _, _ in rows)
    print(f"\nexecgym score, {args.workers} at once: peak RSS of the execgym process")
    print(f"{'batch':<28} {'peak RSS MiB':>12} {'x smallest':>10} {'wall s':>8}  results")
    for label, rss, wall, note in rows:
        print(f"{label:<28} {rss:>12.1f} {rss / smallest:>10.2f} {wall:>8.1f}  {note}")
    spread = max(rss for _, rss, _, _ in rows) / smallest
    print(f"largest / smallest: {spread:.2f} (target: at most 1.20)")


if __name__ == "__main__":
    main()
