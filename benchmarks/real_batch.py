"""A realistic RL batch through execgym (fixed and calibrated limits) and a plain harness.

The batch is :mod:`mutant_workload`'s (HumanEval references and mutants, with rare
infinite loops, sleeps, unbounded recursion, memory bombs, megabytes of output and
raises mixed in), scored in one run, one configuration after the other, each with the
same number of programs at once and the same time limit:

- plain: ``subprocess.run([python, "-I", "-c", program], timeout=limit)`` per rollout,
  with ``RLIMIT_AS`` at the memory limit (a naive harness: no isolation); a rollout
  passes when the program (prompt + completion + tests + ``check``) exits 0;
- execgym, fixed limits: ``execgym score --dataset humaneval ROLLOUTS --timeout LIMIT``
  (warm pool, bwrap), end to end;
- execgym, calibrated: the same with ``--calibrate-limits`` (each task's limit from its
  reference's time, measured in this run: a fresh calibration cache; the target row);
- the same again with the measurements the calibrated run kept (``--skip-cached``
  leaves it out): what each later batch of a training run over the same tasks pays;
- with ``--old-src DIR``: the calibrated run again with execgym from another
  checkout's ``src`` (``PYTHONPATH=DIR``, its own fresh cache), right before this
  checkout's, so a change is compared within one run ("before" rows).

For each: wall time, rollouts/s, CPU per rollout (user + system time of the whole
process tree: ``RUSAGE_CHILDREN`` for the plain harness, samples of the command's
live process tree for execgym, so every sandbox and the zygote are counted) and
pass@1 (mean over tasks of passed / rollouts), and how busy the cores were (CPU
seconds / (workers x wall)). For each calibrated run, where its sandbox time and CPU
went by kind of rollout (the workload's rollout ids say it: ``reference``, ``mutant``,
``loop``, ``sleep``, ``memory``...) and verdict. Targets (issue 23): calibrated at
least 2x the plain harness's rollouts/s with the same pass@1 to 0.1 point.

    .venv/bin/python benchmarks/real_batch.py [--per-task 20] [--timeout 3] [--workers 2]
        [--old-src OTHER/src] [--skip-plain] [--skip-fixed] [--skip-cached]

Figures measured while other work loads the machine are noisy: compare the ratios
within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from mutant_workload import make_workload

from execgym import load_dataset
from execgym.judges.assert_tests import build_program

MEMORY_BYTES = 512 << 20


_TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu_s(root: int) -> float:
    """CPU seconds of ``root`` and its live descendants, with what each has reaped.

    ``utime + stime + cutime + cstime`` of every live process of the tree: a process
    that exits is added to its parent's ``cutime``/``cstime`` when reaped, so nothing is
    counted twice (the warm pool's zygote reaps each run it forks).
    """
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = sum(int(value) for value in fields[11:15]) / _TICK
    tree = {root}
    grew = True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in tree and pid not in tree:
                tree.add(pid)
                grew = True
    return sum(times.get(pid, 0.0) for pid in tree)


def run_sampled(
    argv: list[str], env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run ``argv``; its whole process tree's CPU seconds, sampled every 0.1 s.

    A tree whose processes are killed rather than reaped (a sandbox's namespace torn
    down at exit) would lose their CPU from ``RUSAGE_CHILDREN``; the samples keep the
    largest total seen, so at most the last 0.1 s is missed.
    """
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, text=True, env=env)
        best = 0.0
        while proc.poll() is None:
            best = max(best, tree_cpu_s(proc.pid))
            time.sleep(0.1)
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(argv, proc.returncode, out.read(), err.read())
    return done, best


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def pass_at_1(passed: list[tuple[str, bool]]) -> float:
    """Mean over tasks of the share of its rollouts that passed (in percent)."""
    per_task: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for task_id, ok in passed:
        per_task[task_id][0] += 1
        per_task[task_id][1] += ok
    return 100 * sum(c / n for n, c in per_task.values()) / len(per_task)


def plain(rollouts: list[dict], timeout_s: float, workers: int) -> list[tuple[str, bool]]:
    tasks = load_dataset("humaneval")

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))

    def one(rollout: dict) -> tuple[str, bool]:
        task = tasks[rollout["task_id"]]
        program = (
            build_program(task, rollout["completion"])
            + f"\n\n{task.tests}\n\ncheck({task.entry_point})\n"
        )
        try:
            done = subprocess.run(
                [sys.executable, "-I", "-c", program],
                capture_output=True,
                timeout=timeout_s,
                preexec_fn=limit_memory,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return task.task_id, False
        return task.task_id, done.returncode == 0

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, rollouts))


def kind_of(rollout_id: str) -> str:
    """The workload's kind of a rollout (``HumanEval/3#mutant-m4#7`` is ``mutant``)."""
    parts = rollout_id.split("#")
    return parts[1].split("-")[0] if len(parts) > 2 else "?"


def breakdown(records: list[dict]) -> str:
    """Sandbox seconds and run CPU seconds by kind and verdict, largest first (a table)."""
    rows: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for record in records:
        row = rows[(kind_of(record["rollout_id"]), record["verdict"])]
        row[0] += 1
        row[1] += record["wall_time_s"] or 0
        row[2] += record["cpu_time_s"] or 0
        row[3] = max(row[3], (record["peak_memory_bytes"] or 0) / 2**20)
    wall = sum(row[1] for row in rows.values()) or 1.0
    cpu = sum(row[2] for row in rows.values()) or 1.0
    lines = [
        f"    {'kind':<10} {'verdict':<16} {'count':>5} {'sandbox s':>9} {'share':>6} "
        f"{'CPU s':>6} {'share':>6} {'s each':>7} {'peak MiB':>8}"
    ]
    for (kind, verdict), (n, w, c, peak) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
        lines.append(
            f"    {kind:<10} {verdict:<16} {n:>5.0f} {w:>9.1f} {100 * w / wall:>5.1f}% "
            f"{c:>6.1f} {100 * c / cpu:>5.1f}% {w / n:>7.3f} {peak:>8.0f}"
        )
    lines.append(f"    {'all':<10} {'':<16} {len(records):>5} {wall:>9.1f} {'':>6} {cpu:>6.1f}")
    return "\n".join(lines)


def execgym_cli(
    rollouts_path: Path,
    timeout_s: float,
    workers: int,
    folder: Path,
    mode: str,
    src: str | None = None,
) -> tuple[list[tuple[str, bool]], dict[str, float], float, str, list[dict]]:
    """``execgym score`` of the batch: ``mode`` is ``fixed``, ``calibrated`` or ``cached``.

    ``cached`` is ``--calibrate-limits`` again, with the measurements the ``calibrated``
    run left in this run's cache (what every batch after the first pays in training).
    ``src``: run execgym from that ``src`` folder (another checkout) instead, with a
    cache of its own. Returns the passes, ``{verdict: count}``, CPU seconds, where the
    sandbox time went and the result records.
    """
    tag = mode if src is None else f"{mode}-before"
    out = folder / f"{tag}.jsonl"
    argv = [sys.executable, "-m", "execgym", "score", "--dataset", "humaneval"]
    argv += [str(rollouts_path), "-o", str(out), "--timeout", str(timeout_s)]
    argv += ["--workers", str(workers), "--k", "1"]
    if mode != "fixed":
        argv.append("--calibrate-limits")
    cache = folder / ("cache" if src is None else "cache-before")  # measured in this run
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    if src is not None:
        env["PYTHONPATH"] = src
    done, cpu_s = run_sampled(argv, env)
    if done.returncode != 0:
        raise SystemExit(f"execgym score failed ({done.returncode}): {done.stderr[-2000:]}")
    passed: list[tuple[str, bool]] = []
    verdicts: dict[str, float] = defaultdict(int)
    seconds: dict[str, float] = defaultdict(float)  # sandbox seconds per verdict
    measured: set[str] = set()
    records: list[dict] = []
    floor_tries: list[float] = []  # sandbox seconds of floor tries judged again
    with out.open() as results:
        for line in results:
            record = json.loads(line)
            records.append(record)
            passed.append((record["task_id"], record["verdict"] == "passed"))
            verdicts[record["verdict"]] += 1
            seconds[record["verdict"]] += record["wall_time_s"] or 0
            calibration = record.get("calibration") or {}
            if calibration.get("calibrated") and not calibration.get("cached"):
                measured.add(record["task_id"])
            if calibration.get("judged_again"):  # the run under the floor came first
                floor_tries.append(calibration["floor_try"]["wall_time_s"] or 0)
    total = sum(seconds.values())
    where = ", ".join(
        f"{verdict} {seconds[verdict]:.1f} s ({100 * seconds[verdict] / total:.0f} %)"
        for verdict in sorted(seconds, key=seconds.__getitem__, reverse=True)
    )
    where = f"{where}; references measured: {len(measured)}"
    if mode != "fixed":
        where += f"; floor tries judged again: {len(floor_tries)}, {sum(floor_tries):.1f} s more"
    return passed, dict(verdicts), cpu_s, where, records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-task", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=3.0)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-plain", action="store_true")
    parser.add_argument("--skip-fixed", action="store_true")
    parser.add_argument(
        "--old-src",
        metavar="DIR",
        help="also run the calibrated batch with execgym from this src folder (another "
        "checkout's), right before this checkout's: a 'before' row",
    )
    parser.add_argument(
        "--skip-cached",
        action="store_true",
        help="leave out the calibrated run that reuses the first one's measurements",
    )
    parser.add_argument(
        "--keep", metavar="DIR", help="keep each run's results file (and the batch) in DIR"
    )
    args = parser.parse_args()
    rollouts = make_workload(args.per_task, args.seed)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        rollouts_path = folder / "rollouts.jsonl"
        rollouts_path.write_text("".join(json.dumps(r) + "\n" for r in rollouts))
        configs: list[tuple[str, str, str | None]] = []
        if not args.skip_plain:
            configs.append(("plain subprocess.run", "plain", None))
        if not args.skip_fixed:
            configs.append(("execgym, fixed limits", "fixed", None))
        if args.old_src:
            configs.append(("execgym, calibrated, before", "calibrated", args.old_src))
        configs.append(("execgym, calibrated", "calibrated", None))
        if not args.skip_cached:
            configs.append(("  same, measurements kept", "cached", None))
        for name, mode, src in configs:
            cpu0, wall0 = _children_cpu(), time.perf_counter()
            load = os.getloadavg()[0]
            records: list[dict] = []
            if mode == "plain":
                passed, verdicts = plain(rollouts, args.timeout, args.workers), {}
                cpu, where = _children_cpu() - cpu0, ""
            else:
                passed, verdicts, cpu, where, records = execgym_cli(
                    rollouts_path, args.timeout, args.workers, folder, mode, src
                )
            wall = time.perf_counter() - wall0
            busy = cpu / (args.workers * wall)
            rows.append((name, wall, len(passed) / wall, 1000 * cpu / len(passed), passed))
            print(
                f"{name.strip()}: {wall:.1f} s, cores {100 * busy:.0f} % busy, load "
                f"{load:.1f} -> {os.getloadavg()[0]:.1f}, verdicts {verdicts}",
                flush=True,
            )
            if where:
                print(f"  sandbox seconds by verdict: {where}", flush=True)
            if mode == "calibrated":
                print(breakdown(records), flush=True)
    print(
        f"\n{len(rollouts)} rollouts (HumanEval x {args.per_task}, seed {args.seed}), "
        f"{args.workers} at once, limit {args.timeout:g} s"
    )
    header = ("configuration", "wall s", "rollouts/s", "CPU ms/rollout", "pass@1 %")
    print(f"{header[0]:<28} {header[1]:>8} {header[2]:>11} {header[3]:>15} {header[4]:>9}")
    for name, wall, rate, cpu_ms, passed in rows:
        print(f"{name:<28} {wall:>8.1f} {rate:>11.1f} {cpu_ms:>15.1f} {pass_at_1(passed):>9.2f}")
    by_name = {row[0]: row for row in rows}
    calibrated_row = by_name["execgym, calibrated"]
    fixed_row = by_name.get("execgym, fixed limits")
    if fixed_row is not None:
        print(
            f"calibrated vs fixed: {calibrated_row[2] / fixed_row[2]:.2f}x rollouts/s, pass@1 "
            f"{pass_at_1(calibrated_row[4]) - pass_at_1(fixed_row[4]):+.2f} points"
        )
    before = by_name.get("execgym, calibrated, before")
    if before is not None:
        print(
            f"calibrated vs before: {calibrated_row[2] / before[2]:.2f}x rollouts/s, pass@1 "
            f"{pass_at_1(calibrated_row[4]) - pass_at_1(before[4]):+.2f} points"
        )
    if "plain subprocess.run" in by_name:
        plain_row = by_name["plain subprocess.run"]
        print(
            f"calibrated vs plain: {calibrated_row[2] / plain_row[2]:.2f}x rollouts/s "
            f"(target >= 2x), pass@1 {pass_at_1(calibrated_row[4]) - pass_at_1(plain_row[4]):+.2f}"
            " points (target within 0.1)"
        )
        kept = by_name.get("  same, measurements kept")
        if kept is not None:
            print(
                f"measurements kept vs plain: {kept[2] / plain_row[2]:.2f}x rollouts/s, pass@1 "
                f"{pass_at_1(kept[4]) - pass_at_1(plain_row[4]):+.2f} points"
            )


if __name__ == "__main__":
    main()
