"""Programs per second through ``execgym serve``'s ``/run_code`` against the sandbox itself.

Starts a real ``execgym serve`` (uvicorn, warm pool) on a free port and sends N
verl-shaped ``/run_code`` requests, C at a time, over keep-alive connections; then runs
the same N programs C at a time straight through a warm pool in this process, in
alternating rounds so that machine load hits both ways alike. Prints
programs/s and p50/p99 latency (ms) for each, and the HTTP cost per program. Both ways
use ``--workers C`` sandboxes at once.

    .venv/bin/python benchmarks/server_throughput.py [--runs 400] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

import httpx

from execgym.sandbox import Status, WarmPoolSandbox

HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}
CODE = "a, b = map(int, input().split())\nprint(a + b)\n"


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def measure(
    runs: int, concurrency: int, one: Callable[[], Awaitable[None]]
) -> tuple[float, list[float]]:
    """Run ``one`` ``runs`` times, ``concurrency`` at once: (seconds, latencies)."""
    latencies: list[float] = []
    gate = asyncio.Semaphore(concurrency)

    async def timed() -> None:
        async with gate:
            started = time.perf_counter()
            await one()
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(timed() for _ in range(runs)))
    return time.perf_counter() - started, latencies


def start_server(port: int, workers: int) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "execgym", "serve", "--port", str(port)]
    argv += ["--workers", str(workers), "--max-in-flight", "100000"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("execgym serve did not become ready within 60 s")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    body = json.dumps(
        {
            "compile_timeout": 10,
            "run_timeout": 10,
            "code": CODE,
            "stdin": "2 3\n",
            "memory_limit_MB": 1024,
            "language": "python",
            "files": {},
            "fetch_files": [],
        }
    )
    server = start_server(port, args.concurrency)
    limits = httpx.Limits(max_keepalive_connections=args.concurrency)
    client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=limits)
    names = ("warm pool, in process", "execgym serve /run_code")
    spent_s = dict.fromkeys(names, 0.0)
    latencies: dict[str, list[float]] = {name: [] for name in names}
    try:
        async with client as http, WarmPoolSandbox() as pool:

            async def over_http() -> None:
                response = await http.post("/run_code", content=body, headers=HEADERS, timeout=60)
                answer = response.json()
                if (answer.get("run_result") or {}).get("stdout") != "5\n":
                    raise RuntimeError(f"unexpected answer: {answer}")

            async def direct() -> None:
                result = await pool.run_python(CODE.encode(), stdin=b"2 3\n")
                if result.status is not Status.OK or result.stdout != b"5\n":
                    raise RuntimeError(f"unexpected result: {result}")

            ways = dict(zip(names, (direct, over_http), strict=True))
            for one in ways.values():  # warm-up
                await measure(args.concurrency * 4, args.concurrency, one)
            per_round = max(1, args.runs // args.rounds)
            for number in range(args.rounds):  # alternate, so load hits both alike
                order = list(ways.items()) if number % 2 == 0 else list(ways.items())[::-1]
                for name, one in order:
                    seconds, measured = await measure(per_round, args.concurrency, one)
                    spent_s[name] += seconds
                    latencies[name] += measured
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    rates = {name: len(latencies[name]) / spent_s[name] for name in names}
    direct_rate, http_rate = (rates[name] for name in names)

    print(f"{args.runs} programs each way, {args.concurrency} at a time, {args.rounds} rounds")
    for name in names:
        p50, p99 = (percentile(latencies[name], q) * 1000 for q in (0.5, 0.99))
        print(f"{name:<26} {rates[name]:7.1f} programs/s   p50 {p50:6.1f} ms   p99 {p99:6.1f} ms")
    overhead_ms = (1 / http_rate - 1 / direct_rate) * 1000 * args.concurrency
    print(
        f"HTTP cost per program: {overhead_ms:.1f} ms of a worker's time "
        f"({http_rate / direct_rate:.2f}x the in-process rate)"
    )


if __name__ == "__main__":
    asyncio.run(main())
