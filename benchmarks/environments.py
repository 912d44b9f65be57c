"""Environments side by side, in one run, on one image (the Debian test image).

Prints, all measured in this run:

1. start-to-first-command p50/p99 (ms) of ``python3 -c "print('ok')"`` in the image: our
   tiers (fresh bwrap, prestarted bwrap, warm pool, gVisor) against ``podman run --rm``
   (Debian's podman with runc: crun refuses this host's hybrid cgroup layout, and the
   default rlimits exceed the hard limits here) and plain ``runsc run`` of an OCI bundle
   whose root is the same image's unpacked root (``runsc spec``'s defaults, network
   off, as root), interleaved run by run so load hits all alike, with each one's ratio
   to podman's p50 (target: warm start <= 1/10); plus fresh bwrap in one of the task
   environments of 3., whose unchanged directories are bound from the image's root;
2. first-use cost: importing and unpacking the image into an empty cache, s per GiB;
3. disk used by 12 task environments built from specs on one base (target: < 1.2x the
   base plus their own layers);
4. 32 concurrent repo-task episodes (a real SWE task, tests/data/swe) solved by a
   scripted agent in the environment: wall time, peak memory in use on the host, and
   what was left behind (processes, scratch directories).

    .venv/bin/python benchmarks/environments.py [--runs 40] [--episodes 32]

Needs bwrap, mmdebstrap/umoci/skopeo (the image), podman and runsc (as root) for their rows,
network for the spec build (pip).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.environments.images import build_test_image  # noqa: E402

from execgym.environments import Environment, EnvironmentCache  # noqa: E402
from execgym.environments.routing import resolve  # noqa: E402
from execgym.environments.spec import EnvironmentSpec, build  # noqa: E402
from execgym.limits import DEFAULT_LIMITS  # noqa: E402
from execgym.sandbox import RunRequest, open_sandbox  # noqa: E402

PROGRAM = "print('ok')"
PODMAN = ["--runtime=runc", "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=1024:1024"]


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def used_memory() -> int:
    """Bytes of host memory in use (MemTotal - MemAvailable)."""
    fields = {
        line.split(":")[0]: int(line.split()[1]) * 1024
        for line in Path("/proc/meminfo").read_text().splitlines()
    }
    return fields["MemTotal"] - fields["MemAvailable"]


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc: each process's PPid)."""
    parents: dict[int, int] = {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        ppid = next(int(x.split()[1]) for x in text.splitlines() if x.startswith("PPid:"))
        parents[int(status.parent.name)] = ppid
    found, frontier = [], [pid]
    while frontier:
        here = frontier.pop()
        children = [p for p, parent in parents.items() if parent == here]
        found += children
        frontier += children
    return found


def leftovers() -> tuple[int, int]:
    """(processes below this one, execgym scratch dirs in /tmp) right now."""
    scratch = len(list(Path(tempfile.gettempdir()).glob("execgym-*")))
    return len(descendants(os.getpid())), scratch


def runsc_bundle(env: Environment, scratch: Path) -> Path:
    """An OCI bundle running the program in ``env``'s root with ``runsc spec``'s defaults."""
    if env.rootfs is None or env.shared:
        raise ValueError("plain runsc needs an environment whose root holds every directory")
    bundle = scratch / "runsc-bundle"
    bundle.mkdir()
    argv = ["runsc", "spec", f"--bundle={bundle}", "--", "python3", "-c", PROGRAM]
    subprocess.run(argv, check=True)
    config = json.loads((bundle / "config.json").read_text())
    config["root"] = {"path": str(env.rootfs), "readonly": True}
    config["process"]["env"] = [f"PATH={env.config.env.get('PATH', '/usr/bin:/bin')}"]
    (bundle / "config.json").write_text(json.dumps(config))
    return bundle


async def latency(tag: str | None, cache: EnvironmentCache, runs: int, scratch: Path) -> None:
    env = cache.get("debian")
    ways: dict[str, Callable[[], Awaitable[None]]] = {}
    boxes = {
        "fresh bwrap": open_sandbox("bwrap", environment=env),
        "prestarted bwrap": open_sandbox("bwrap", prestart=2, environment=env),
        "warm pool": open_sandbox("bwrap", warm_pool=True, environment=env),
    }
    if shutil.which("runsc"):
        boxes["gVisor (runsc)"] = open_sandbox("gvisor", environment=env)
    # a task environment built on the image: its unchanged directories are the image's,
    # bound over its own empty mount points (environments.sharing)
    task = next((e for e in cache.list() if e.shared), None)
    if task is not None:
        boxes[f"fresh bwrap, task ({len(task.shared)} shared)"] = open_sandbox(
            "bwrap", environment=task
        )
    request = RunRequest(python_source=PROGRAM.encode(), limits=DEFAULT_LIMITS)
    for name, box in boxes.items():

        async def run(box: Any = box, name: str = name) -> None:
            result = await box.run(request)
            assert result.stdout.strip() == b"ok", (name, result)

        ways[name] = run
    if tag is not None and shutil.which("runc") is None:
        print("podman row left out: Debian's runc is not installed (apt-get install runc)")
    elif tag is not None:

        async def podman() -> None:
            argv = ["podman", "run", "--rm", "--network=none", *PODMAN, tag, "python3", "-c"]
            done = await asyncio.to_thread(
                subprocess.run, [*argv, PROGRAM], capture_output=True, check=False
            )
            assert done.stdout.strip() == b"ok", done.stderr[-500:]

        ways["podman run --rm"] = podman
    if shutil.which("runsc") and os.geteuid() == 0:
        bundle = runsc_bundle(env, scratch)
        counter = iter(range(1 << 30))

        async def runsc() -> None:
            state = ["--root", str(scratch / "runsc-state"), "--network=none", "--ignore-cgroups"]
            run = ["run", f"--bundle={bundle}", f"bench-{os.getpid()}-{next(counter)}"]
            done = await asyncio.to_thread(
                subprocess.run, ["runsc", *state, *run], capture_output=True, check=False
            )
            assert done.stdout.strip() == b"ok", done.stderr[-500:]

        ways["runsc run (plain)"] = runsc
    times: dict[str, list[float]] = {name: [] for name in ways}
    for way in ways.values():  # warm-up: first runs start pools and zygotes
        await way()
    for _ in range(runs):
        for name, way in ways.items():
            started = time.perf_counter()
            await way()
            times[name].append((time.perf_counter() - started) * 1000)
    for box in boxes.values():
        await box.aclose()
    base = percentile(times["podman run --rm"], 0.5) if "podman run --rm" in times else None
    print(f"\n1. start-to-first-command, {runs} runs each (ms)")
    print(f"{'way':<32}{'p50':>9}{'p99':>9}{'p50 / podman':>15}")
    for name, values in times.items():
        ratio = f"{percentile(values, 0.5) / base:.3f}" if base else "-"
        print(
            f"{name:<32}{percentile(values, 0.5):>9.1f}{percentile(values, 0.99):>9.1f}{ratio:>15}"
        )


def first_use_and_disk(image: Path, scratch: Path, tasks: int) -> EnvironmentCache:
    cache = EnvironmentCache(scratch / "cache")
    started = time.perf_counter()
    base = cache.import_image(f"{image / 'layout'}:base", name="debian")
    seconds = time.perf_counter() - started
    base_bytes = cache.disk_use().total_bytes
    gib = base_bytes / 2**30
    print(f"\n2. first use: import + unpack {base_bytes / 2**20:.0f} MiB in {seconds:.2f} s")
    print(f"   = {seconds / gib:.2f} s/GiB")
    for index in range(tasks):
        build(
            EnvironmentSpec(base="debian", setup=(f"echo task {index} > /opt/task-{index}",)), cache
        )
    use = cache.disk_use()
    layer_dirs = sorted((cache.root / "layers").iterdir())
    sizes = {p.name: _tree_bytes(p) for p in layer_dirs}
    own = sum(sizes.values()) - sum(sizes[d.removeprefix("sha256:")] for d in base.layers)
    budget = 1.2 * (base_bytes + own)
    print(f"\n3. disk: {tasks} task environments on one base")
    print(f"   base {base_bytes / 2**20:.1f} MiB, their own layers {own / 2**20:.2f} MiB,")
    print(
        f"   total {use.total_bytes / 2**20:.1f} MiB = {use.total_bytes / (base_bytes + own):.3f}x"
    )
    print(f"   (target < 1.2x = {budget / 2**20:.1f} MiB)")
    return cache


def _tree_bytes(path: Path) -> int:
    seen: set[int] = set()
    total = 0
    for item in path.rglob("*"):
        stat = item.lstat()
        if stat.st_ino not in seen and item.is_file() and not item.is_symlink():
            seen.add(stat.st_ino)
            total += stat.st_size
    return total


async def episodes(cache: EnvironmentCache, count: int) -> None:
    from execgym.episodes import AsyncEnv, ScriptedAgent
    from execgym.episodes.grading import Grader
    from execgym.episodes.swe import apply_patch, load_instances, patched_paths, repo_task
    from execgym.episodes.task import repo_files

    data = ROOT / "tests" / "data" / "swe" / "instances.jsonl"
    row = next(json.loads(x) for x in data.read_text().splitlines() if "pytoolz/toolz" in x)
    task = repo_task(next(t for t in load_instances(data) if t.task_id == row["instance_id"]))
    resolve(task.environment, cache)  # built before the clock starts
    fixed = apply_patch(repo_files(task), row["patch"])
    actions = [
        {"tool": "write_file", "arguments": {"path": n, "content": fixed[n].decode()}}
        for n in patched_paths(row["patch"])
    ] + [{"tool": "submit"}]
    before = leftovers()
    grader = Grader(max_concurrent=4)
    peak = used_memory()
    idle = peak
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, used_memory())
            await asyncio.sleep(0.05)

    async def one() -> float | None:
        async with AsyncEnv(task, grader=grader) as env:
            return (await ScriptedAgent(actions).arun(env)).reward

    sampler = asyncio.create_task(sample())
    started = time.perf_counter()
    rewards = await asyncio.gather(*(one() for _ in range(count)))
    wall = time.perf_counter() - started
    done.set()
    await sampler
    after = leftovers()
    print(f"\n4. {count} concurrent repo-task episodes ({task.id}, in its environment)")
    print(f"   wall {wall:.1f} s, rewards {sorted(set(rewards))} ({rewards.count(1.0)} solved)")
    print(f"   peak host memory in use +{(peak - idle) / 2**20:.0f} MiB over idle")
    print(
        f"   left behind: our processes {before[0]} -> {after[0]}, scratch dirs "
        f"{before[1]} -> {after[1]}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--tasks", type=int, default=12)
    args = parser.parse_args()
    image = build_test_image()
    with tempfile.TemporaryDirectory(prefix="bench-environments-") as scratch:
        os.environ["EXECGYM_ENV_CACHE"] = str(Path(scratch) / "cache")
        cache = first_use_and_disk(image, Path(scratch), args.tasks)
        tag = None
        if shutil.which("podman"):
            loaded = subprocess.run(
                ["podman", "load", "-q", "-i", str(image / "top-docker.tar")],
                capture_output=True,
                text=True,
                check=True,
            )
            tag = loaded.stdout.strip().rsplit(" ", 1)[-1]
        try:
            asyncio.run(latency(tag, cache, args.runs, Path(scratch)))
        finally:
            if tag is not None:
                subprocess.run(["podman", "rmi", "-f", tag], capture_output=True, check=False)
        asyncio.run(episodes(cache, args.episodes))


if __name__ == "__main__":
    main()
