"""The processes ``benchmarks/memory.py`` measures, each reporting its own peak RSS.

Every process runs as ``python -c WRAPPER <execgym arguments>``: an ``atexit`` hook
writes the process image's own ``VmHWM`` (kiB) to ``$EXECGYM_BENCH_RSS`` and then
``execgym.cli.main`` behaves exactly as the ``execgym`` command. Long-running ones
(``execgym worker``, ``execgym serve``) are stopped with SIGTERM, on which both end
normally (the worker drains, uvicorn shuts down) and so report.

- :func:`score_here`: ``execgym score`` embedded (what memory.py measured first).
- :func:`score_broker`: ``execgym score --broker redis://...`` with one
  ``execgym worker`` on a redis-server started for the run: the client's peak, the
  worker's, and Redis's own (``used_memory_peak``).
- :func:`score_served`: ``execgym serve --broker redis://...`` and one worker; the
  batch is one streamed ``POST /v1/score`` (``stream: true``: NDJSON, each results
  line read and counted as it comes, then the summary line); a streamed job keeps no
  results.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

WRAPPER = """
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


@dataclass
class Run:
    """One batch through one surface: peak RSS in MiB per process, wall, a note."""

    peaks: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0
    note: str = ""


def _start(args: list[str], report: Path, log: Path, **extra_env: str) -> subprocess.Popen[bytes]:
    report.unlink(missing_ok=True)  # a run that does not report must not read the last one's
    env = {**os.environ, **extra_env, "EXECGYM_BENCH_RSS": str(report)}
    with log.open("wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-c", WRAPPER, *args], env=env, stdout=sink, stderr=subprocess.STDOUT
        )


def _peak(report: Path, what: str, log: Path) -> float:
    if not report.exists():
        raise SystemExit(
            f"{what} did not report its peak RSS; its output:\n{log.read_text()[-3000:]}"
        )
    return int(report.read_text()) / 1024


def _stop(process: subprocess.Popen[bytes], what: str, log: Path) -> None:
    """SIGTERM ``process`` and wait for it (it must end by itself, reporting its peak)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        output = log.read_text()[-3000:]
        raise SystemExit(f"{what} did not stop on SIGTERM; its output:\n{output}") from None


def _results(out: Path) -> str:
    lines = 0
    verdicts: dict[str, int] = {}
    with out.open() as source:
        for line in source:
            lines += 1
            verdict = json.loads(line)["verdict"]
            verdicts[verdict] = verdicts.get(verdict, 0) + 1
    return f"{lines} results {verdicts}"


def score_here(
    tasks: Path, rollouts: Path, workers: int, folder: Path, extra: tuple[str, ...] = ()
) -> Run:
    """``execgym score`` in this host's warm pool (``extra``: more of its options): its peak RSS."""
    out, report, log = folder / "results.jsonl", folder / "score.rss", folder / "score.log"
    args = ["score", str(tasks), str(rollouts), "-o", str(out), "--workers", str(workers), *extra]
    started = time.perf_counter()
    client = _start([*args, "--k", "1"], report, log)
    if client.wait() != 0:
        raise SystemExit(f"execgym score failed ({client.returncode}): {log.read_text()[-2000:]}")
    wall_s = time.perf_counter() - started
    return Run({"score": _peak(report, "execgym score", log)}, wall_s, _results(out))


class _Redis:
    """A redis-server of its own for one run (execgym.testing.RedisServer), then gone."""

    def __init__(self, folder: Path) -> None:
        from execgym.testing import RedisServer

        folder.mkdir(parents=True, exist_ok=True)
        self.server = RedisServer(folder)

    def __enter__(self) -> _Redis:
        self.server.start()
        return self

    def peak_mib(self) -> float:
        """Redis's own ``used_memory_peak`` (its data, not the process)."""
        import redis

        client = redis.Redis(port=self.server.port)
        try:
            return int(client.info("memory")["used_memory_peak"]) / 2**20
        finally:
            client.close()

    def __exit__(self, *_exc: object) -> None:
        self.server.kill()


def _worker(url: str, workers: int, folder: Path) -> tuple[subprocess.Popen[bytes], Path, Path]:
    report, log = folder / "worker.rss", folder / "worker.log"
    args = ["worker", "--broker", url, "--concurrency", str(workers)]
    return _start(args, report, log), report, log


def score_broker(
    tasks: Path, rollouts: Path, workers: int, folder: Path, extra: tuple[str, ...] = ()
) -> Run:
    """``execgym score --broker redis://...`` (``extra``: more of its options) and one
    ``execgym worker``: both peaks."""
    out, report, log = folder / "results.jsonl", folder / "client.rss", folder / "client.log"
    with _Redis(folder / "redis") as redis:
        worker, worker_report, worker_log = _worker(redis.server.url, workers, folder)
        try:
            started = time.perf_counter()
            args = ["score", str(tasks), str(rollouts), "-o", str(out), "--k", "1", *extra]
            client = _start([*args, "--broker", redis.server.url], report, log)
            if client.wait() != 0:
                raise SystemExit(f"execgym score --broker failed: {log.read_text()[-2000:]}")
            wall_s = time.perf_counter() - started
        finally:
            _stop(worker, "execgym worker", worker_log)
        peaks = {
            "client": _peak(report, "execgym score --broker", log),
            "worker": _peak(worker_report, "execgym worker", worker_log),
            "redis data": redis.peak_mib(),
        }
    return Run(peaks, wall_s, _results(out))


def _wait_ready(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"execgym serve ended: {log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"execgym serve did not answer in 120 s: {log.read_text()[-3000:]}")


def score_served(
    tasks: Path, rollouts: Path, workers: int, folder: Path, extra: tuple[str, ...] = ()
) -> Run:
    """``execgym serve --broker redis://...`` and one worker; the batch as one streamed POST."""
    from execgym.testing import free_port

    if extra:
        raise SystemExit("--score-args is for --surface score and broker, not serve")

    report, log = folder / "serve.rss", folder / "serve.log"
    items = [json.loads(line) for line in rollouts.read_text().splitlines()]
    body = {
        "tasks": [json.loads(line) for line in tasks.read_text().splitlines()],
        "rollouts": items,
        "stream": True,
    }
    data = json.dumps(body).encode()
    with _Redis(folder / "redis") as redis:
        worker, worker_report, worker_log = _worker(redis.server.url, workers, folder)
        port = free_port()
        size = str(max(len(items), 1))
        serve = _start(
            ["serve", "--port", str(port), "--broker", redis.server.url, "--max-in-flight", size],
            report,
            log,
            EXECGYM_SERVER_MAX_BATCH=size,
        )
        try:
            _wait_ready(port, serve, log)
            started = time.perf_counter()
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/score",
                data=data,
                headers={"Content-Type": "application/json"},
            )
            verdicts: dict[str, int] = {}
            with urllib.request.urlopen(request, timeout=3600) as answer:  # noqa: S310 (http://127.0.0.1)
                for line in answer:
                    item = json.loads(line)
                    if "summary" in item:
                        job = item["summary"]
                        break
                    verdicts[item["verdict"]] = verdicts.get(item["verdict"], 0) + 1
                else:
                    raise SystemExit("the stream ended without its summary line")
            wall_s = time.perf_counter() - started
        finally:
            _stop(serve, "execgym serve", log)
            _stop(worker, "execgym worker", worker_log)
        peaks = {
            "serve": _peak(report, "execgym serve", log),
            "worker": _peak(worker_report, "execgym worker", worker_log),
            "redis data": redis.peak_mib(),
        }
    if verdicts != job["counts"]:
        raise SystemExit(f"streamed lines {verdicts} differ from the summary {job['counts']}")
    note = f"{job['state']}: {job['finished']} of {job['total']} results streamed {job['counts']}"
    return Run(peaks, wall_s, note)


SURFACES = {"score": score_here, "broker": score_broker, "serve": score_served}
"""``--surface`` of memory.py: what scores each batch."""
