"""A bounded load test of a real ``execgym serve`` over loopback TCP (issue 18 kind 5).

Unauthenticated clients declare 62 MiB bodies (the field case: eight of them took the
server from 68 to ~590 MiB), send what they can and stall; others stream chunked
bodies; authenticated clients trickle bodies a byte at a time or declare oversized
ones; others connect and send nothing, or trickle their headers (slowloris).
Meanwhile an authenticated client runs programs. The server process's resident
memory is sampled from ``/proc`` throughout: its growth must stay under
:data:`RSS_BOUND_BYTES`, every hostile connection must be answered (401, 408, 413)
or, without complete headers, closed by the server at its deadline, and every
authenticated program must be served.

Everything stops by itself: sockets have timeouts, the whole attack is bounded by
:data:`ATTACK_S`, and the server is stopped with SIGTERM (then killed) at the end.
Run ``pytest -s tests/server/test_serve_load.py`` to see the figures.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.conftest import require
from tests.server.test_run_code import VERL_HEADERS, verl_body

TOKEN = "load-token"
MiB = 1 << 20
RSS_BOUND_BYTES = 32 * MiB
"""How much the server's peak resident memory may grow during the attack."""
DECLARED = 62 * MiB
"""What each unauthenticated client declares and tries to send (the field case)."""
ATTACK_S = 4.0
"""Longest any one hostile client keeps sending."""
IDLE_TIMEOUT_S = 1.0
"""The server's body idle timeout (and grace before the rate counts) in this test."""
HEADER_TIMEOUT_S = 1.0
"""The server's deadline for request headers in this test."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def memory(pid: int) -> tuple[int, int]:
    """``(VmRSS, VmHWM)`` of ``pid`` in bytes: resident memory now, and its peak."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) * 1024
    return fields["VmRSS"], fields["VmHWM"]


@contextlib.contextmanager
def serve() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A real ``execgym serve`` on loopback with a token; its URL and process."""
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    port = free_port()
    env = {
        **os.environ,
        "EXECGYM_SERVER_TOKEN": TOKEN,
        "EXECGYM_SERVER_BODY_IDLE_TIMEOUT_S": str(IDLE_TIMEOUT_S),
        "EXECGYM_SERVER_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S),
    }
    argv = [sys.executable, "-m", "execgym", "serve", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--workers", "1"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"execgym serve exited early ({proc.returncode})")
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        else:
            pytest.fail("execgym serve did not answer /healthz within 60 s")
        yield url, proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass
class Client:
    """One hostile connection and what happened to it."""

    name: str
    head: bytes
    body: str  # "declared": send DECLARED bytes; "chunked": chunks; "trickle": a byte at a time
    status: int | None = None
    sent: int = 0
    closed_by_server: bool = False
    answered_after_s: float | None = None
    closed_after_s: float | None = None
    errors: list[str] = field(default_factory=list)


def request_head(extra: str) -> bytes:
    return f"POST /run_code HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n".encode()


def send_more(sock: socket.socket, client: Client, piece: bytes) -> None:
    """The next bytes of ``client``'s body, sent as its kind sends them."""
    if client.body == "nothing":
        time.sleep(0.05)
    elif client.body == "trickle":
        sock.send(b"x")
        client.sent += 1
        time.sleep(0.25)
    elif client.body == "chunked":
        sock.send(b"100000\r\n" + piece + b"\r\n")
        client.sent += MiB
    elif client.sent < DECLARED:
        client.sent += sock.send(piece[: DECLARED - client.sent])


def attack(port: int, client: Client, stop: threading.Event) -> None:
    """Send ``client``'s request as a hostile client would; record the answer."""
    piece = b"x" * MiB
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        started = time.monotonic()
        if client.head:
            sock.sendall(client.head)
        sock.settimeout(0.2)
        answer = b""
        while time.monotonic() - started < ATTACK_S and not stop.is_set():
            try:
                data = sock.recv(65536)
            except TimeoutError:
                data = None
            except OSError as error:  # reset: the server closed it with our bytes unread
                client.errors.append(type(error).__name__)
                client.closed_by_server = True
                break
            if data == b"":
                client.closed_by_server = True
                break
            if data:
                answer += data
                if client.answered_after_s is None:
                    client.answered_after_s = time.monotonic() - started
            try:  # a hostile client ignores the answer and keeps sending
                send_more(sock, client, piece)
            except TimeoutError:
                pass  # the server is not reading: this client stalls
            except OSError as error:  # reset or broken pipe: the server closed it
                client.errors.append(type(error).__name__)
                client.closed_by_server = True
                with contextlib.suppress(OSError):
                    answer += sock.recv(65536)
                break
        if client.closed_by_server:
            client.closed_after_s = time.monotonic() - started
        if answer.startswith(b"HTTP/1.1 "):
            client.status = int(answer[9:12])
        while not stop.is_set() and not client.closed_by_server:
            time.sleep(0.05)  # stall: hold the connection open until the test ends


def test_hostile_bodies_cannot_grow_the_server_and_authenticated_work_is_served() -> None:
    with serve() as (url, proc):
        port = int(url.rsplit(":", 1)[1])
        auth = {**VERL_HEADERS, "Authorization": f"Bearer {TOKEN}"}
        body = verl_body("print(int(input()) * 2)", "21\n")
        warm = httpx.post(f"{url}/run_code", content=body, headers=auth, timeout=60)
        assert warm.status_code == 200, warm.text
        rss_before, hwm_before = memory(proc.pid)
        clients = [
            *(
                Client(
                    f"unauth-declared-{i}",
                    request_head(f"Content-Length: {DECLARED}\r\n"),
                    "declared",
                )
                for i in range(8)
            ),
            *(
                Client(
                    f"unauth-chunked-{i}", request_head("Transfer-Encoding: chunked\r\n"), "chunked"
                )
                for i in range(4)
            ),
            *(
                Client(
                    f"auth-trickle-{i}",
                    request_head(f"Authorization: Bearer {TOKEN}\r\nContent-Length: 100000\r\n"),
                    "trickle",
                )
                for i in range(4)
            ),
            *(
                Client(
                    f"auth-oversized-{i}",
                    request_head(
                        f"Authorization: Bearer {TOKEN}\r\nContent-Length: {DECLARED * 2}\r\n"
                    ),
                    "declared",
                )
                for i in range(2)
            ),
        ]
        clients += [  # slowloris: the request headers never complete
            *(Client(f"idle-connection-{i}", b"", "nothing") for i in range(4)),
            *(
                Client(f"slow-headers-{i}", b"POST /run_code HTTP/1.1\r\nX-Slow: ", "trickle")
                for i in range(4)
            ),
        ]
        stop = threading.Event()
        threads = [
            threading.Thread(target=attack, args=(port, c, stop), daemon=True) for c in clients
        ]
        peak_rss = rss_before
        served: list[int] = []
        for thread in threads:
            thread.start()
        started = time.monotonic()
        while True:  # sample until the hostile clients are done and 3 programs are served
            elapsed_s = time.monotonic() - started
            attacking = elapsed_s < ATTACK_S + 1 and any(t.is_alive() for t in threads)
            if not attacking and (len(served) >= 3 or elapsed_s > 60):
                break
            peak_rss = max(peak_rss, memory(proc.pid)[0])
            if len(served) < 3:  # authenticated work during the attack
                answer = httpx.post(f"{url}/run_code", content=body, headers=auth, timeout=30)
                served.append(answer.status_code)
                assert answer.json()["run_result"]["stdout"] == "42\n"
            time.sleep(0.05)
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
        rss_after, hwm_after = memory(proc.pid)
        peak_rss = max(peak_rss, rss_after)
        growth = max(peak_rss - rss_before, hwm_after - hwm_before)
        print(
            f"\nserver RSS before {rss_before / MiB:.1f} MiB, peak during "
            f"{peak_rss / MiB:.1f} MiB, after {rss_after / MiB:.1f} MiB; VmHWM "
            f"{hwm_before / MiB:.1f} -> {hwm_after / MiB:.1f} MiB; growth {growth / MiB:.1f} MiB "
            f"(bound {RSS_BOUND_BYTES / MiB:.0f} MiB); "
            f"client bytes accepted by the kernel: {sum(c.sent for c in clients) / MiB:.1f} MiB"
        )
        for client in clients:
            print(
                f"  {client.name}: status {client.status}, answered after "
                f"{client.answered_after_s}, sent {client.sent} B, closed after "
                f"{client.closed_after_s}"
            )
        assert served == [200, 200, 200]
        assert growth < RSS_BOUND_BYTES
        expected = {
            "unauth": 401,
            "auth-trickle": 408,
            "auth-oversized": 413,
            "idle-connection": None,  # closed without an answer
            "slow-headers": None,
        }
        for client in clients:
            want = next(code for prefix, code in expected.items() if client.name.startswith(prefix))
            assert client.status == want, client
            assert client.closed_by_server, client
        for client in clients:
            if client.name.startswith(("unauth", "auth-oversized")):
                assert client.answered_after_s is not None
                assert client.answered_after_s < 3.0, client  # from the headers alone
            elif client.name.startswith("auth-trickle"):  # cut after the grace period
                assert client.answered_after_s is not None
                assert client.answered_after_s < IDLE_TIMEOUT_S + 2.5, client
            else:  # no complete headers: closed at the deadline, long before ATTACK_S
                assert client.closed_after_s is not None
                assert client.closed_after_s < HEADER_TIMEOUT_S + 2.5, client
