"""Peak memory of execgym as a batch grows: it must stay flat (issue 23).

Runs the real command line (warm pool, bwrap) on a trivial task (``def f(): return 1``,
so a large batch finishes in reasonable time) at each size of ``--sizes``, and on
``--chatty`` rollouts that each print ``--print-bytes`` (1 MiB by default) to stdout,
and prints the peak resident memory (``VmHWM``) of each execgym process itself
(not of its sandboxes) for each, and its ratio to the smallest batch. The target is
every figure within 20 % of the others.

    .venv/bin/python benchmarks/memory.py [--surface score|broker|serve]
        [--sizes 10000,100000] [--chatty 1000] [--workers 2]
        [--print-bytes 1048576] [--host-only-sizes 100000,1000000]
        [--score-args "--calibrate-limits"] [--old-src /tmp/before/src]

``--surface`` (see ``memory_surfaces.py``): ``score`` (default) is ``execgym score``
embedded; ``broker`` is ``execgym score --broker redis://...`` (the broker client)
with one ``execgym worker`` on a redis-server started for each batch, and prints
the client's, the worker's and Redis's own peak; ``serve`` is ``execgym serve
--broker redis://...`` and one worker, each batch one ``POST /v1/score``.

``--score-args`` adds options to every ``execgym score`` (``--calibrate-limits``,
``--order input``...). ``--old-src DIR`` measures every batch twice, back to back: with
``DIR`` (an older checkout's ``src``) first on ``PYTHONPATH``, then with this tree's
``src``, and prints both (``before`` and ``after`` rows) in the same tables.

``--host-only-sizes`` adds batches whose rollouts name an unknown task: each is scored
``invalid`` on the host without a sandbox, so a million of them runs in a minute or
two and shows the reading, writing and counting alone stay flat.

The peak is read by each process itself at exit (``VmHWM`` of ``/proc/self/status``):
the command runs as ``python -c`` with an ``atexit`` hook around
``execgym.cli.main``, which then behaves exactly as ``execgym``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import tempfile
from pathlib import Path

from memory_surfaces import SURFACES, Run

TASK = {
    "task_id": "t/1",
    "prompt": "def f():\n",
    "entry_point": "f",
    "tests": "def check(candidate):\n    assert candidate() == 1\n",
    "reference": "    return 1\n",  # for --score-args --calibrate-limits
}
SRC = Path(__file__).resolve().parent.parent / "src"


def write_inputs(folder: Path, count: int, completion: str, name: str) -> tuple[Path, Path]:
    tasks = folder / "tasks.jsonl"
    tasks.write_text(json.dumps(TASK) + "\n")
    rollouts = folder / f"{name}.jsonl"
    line = json.dumps({"task_id": "t/1", "completion": completion}) + "\n"
    with rollouts.open("w") as sink:
        for _ in range(count):
            sink.write(line)
    return tasks, rollouts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--surface", choices=sorted(SURFACES), default="score")
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
    parser.add_argument("--score-args", default="", help="More options of execgym score.")
    parser.add_argument("--old-src", type=Path, help="Also measure each batch with this src.")
    args = parser.parse_args()
    surface = SURFACES[args.surface]
    extra = tuple(shlex.split(args.score_args))
    rows: list[tuple[str, Run]] = []
    versions = [("before", args.old_src), ("after", SRC)] if args.old_src else [("", SRC)]

    def measure(tasks: Path, rollouts: Path, workers: int, folder: Path) -> list[Run]:
        runs = []
        for _name, src in versions:
            os.environ["PYTHONPATH"] = str(src)
            runs.append(surface(tasks, rollouts, workers, folder, extra))
        return runs

    def add(label: str, runs: list[Run]) -> None:
        for (name, _src), run in zip(versions, runs, strict=True):
            rows.append((f"{label} {name}".strip(), run))
            print(rows[-1], flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for size in (int(part) for part in args.sizes.split(",") if part):
            tasks, rollouts = write_inputs(folder, size, "    return 1\n", f"trivial{size}")
            add(f"{size} trivial", measure(tasks, rollouts, args.workers, folder))
        for size in (int(part) for part in args.host_only_sizes.split(",") if part):
            tasks, rollouts = write_inputs(folder, size, "    return 1\n", f"unknown{size}")
            rollouts.write_text(rollouts.read_text().replace('"t/1"', '"no-such-task"'))
            label = f"{size} host-only (invalid)"
            add(label, measure(tasks, rollouts, args.workers, folder))
        if args.chatty:
            # print() adds the newline: the program writes exactly --print-bytes.
            chatty = f"    print('x' * {args.print_bytes - 1})\n    return 1\n"
            tasks, rollouts = write_inputs(folder, args.chatty, chatty, "chatty")
            label = f"{args.chatty} printing {args.print_bytes} B"
            add(label, measure(tasks, rollouts, args.workers, folder))
    print(f"\n{' '.join(extra)}" if extra else "", end="")
    for name, _src in versions:
        report(args.surface, args.workers, [row for row in rows if row[0].endswith(name)], name)


def report(surface: str, workers: int, rows: list[tuple[str, Run]], version: str = "") -> None:
    """One table per measured process: peak RSS per batch, its ratio to the smallest."""
    print(
        f"\n{version + ': ' if version else ''}--surface {surface}, {workers} at once; "
        f"load {os.getloadavg()[0]:.1f} at the end"
    )
    for process in rows[0][1].peaks:
        peaks = [run.peaks[process] for _, run in rows]
        smallest = min(peaks)
        unit = "MiB (Redis's used_memory_peak)" if process == "redis data" else "MiB (VmHWM)"
        print(f"\n{process}: peak {unit}")
        print(f"{'batch':<28} {'peak MiB':>9} {'x smallest':>10} {'wall s':>8}  results")
        for (label, run), peak in zip(rows, peaks, strict=True):
            print(
                f"{label:<28} {peak:>9.1f} {peak / smallest:>10.2f} {run.wall_s:>8.1f}  {run.note}"
            )
        print(f"largest / smallest: {max(peaks) / smallest:.2f} (target: at most 1.20)")


if __name__ == "__main__":
    main()
