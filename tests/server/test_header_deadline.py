"""The header deadline of ``execgym serve``'s HTTP protocol, on a real uvicorn socket.

A connection that sends no complete request headers within the deadline is closed
(uvicorn itself keeps it forever: its issue #157); a request whose headers came in
time is never cut, however long its answer takes; a WebSocket, once upgraded, has no
HTTP deadline; keep-alive connections get the deadline again after each response.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
import websockets

from execgym.server.protocol import header_deadline_protocol
from execgym.testing import free_port

DEADLINE_S = 1.0


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """``/slow`` answers after 2 s; ``/ws`` echoes; anything else answers at once."""
    if scope["type"] == "lifespan":
        while (message := await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["type"] == "websocket":
        await receive()  # connect
        await send({"type": "websocket.accept"})
        while (message := await receive())["type"] == "websocket.receive":
            await send({"type": "websocket.send", "text": message.get("text")})
        return
    if scope["path"] == "/slow":
        await asyncio.sleep(2 * DEADLINE_S)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture
def server() -> Iterator[int]:
    port = free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        http=header_deadline_protocol(DEADLINE_S),
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def closed_after_s(sock: socket.socket, limit_s: float = 5.0) -> float | None:
    """Seconds until the server closes ``sock`` (``None`` if not within ``limit_s``)."""
    started = time.monotonic()
    sock.settimeout(limit_s)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return None
    except OSError:
        pass
    return time.monotonic() - started


@pytest.mark.parametrize("sent", [b"", b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: 1"])
def test_a_connection_without_complete_headers_is_closed_at_the_deadline(
    server: int, sent: bytes
) -> None:
    with socket.create_connection(("127.0.0.1", server)) as sock:
        sock.sendall(sent)
        waited = closed_after_s(sock)
    assert waited is not None
    assert waited < DEADLINE_S + 3.0


def test_trickled_headers_are_closed_even_though_bytes_keep_coming(server: int) -> None:
    with socket.create_connection(("127.0.0.1", server)) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\n")
        started = time.monotonic()
        closed = False
        while time.monotonic() - started < 6:
            try:
                sock.sendall(b"X")  # uvicorn's keep-alive timer was reset by each byte
            except OSError:
                closed = True
                break
            time.sleep(0.1)
    assert closed
    assert time.monotonic() - started < DEADLINE_S + 3.0


def test_a_slow_answer_and_keep_alive_requests_are_never_cut(server: int) -> None:
    with httpx.Client(base_url=f"http://127.0.0.1:{server}") as client:
        assert client.get("/slow", timeout=10).text == "ok"  # longer than the deadline
        time.sleep(DEADLINE_S / 10)
        assert client.get("/", timeout=10).text == "ok"  # same connection, in time


async def test_a_websocket_outlives_the_http_deadline(server: int) -> None:
    async with websockets.connect(f"ws://127.0.0.1:{server}/ws") as ws:
        await asyncio.sleep(DEADLINE_S * 2)
        await ws.send("still here")
        assert await asyncio.wait_for(ws.recv(), 5) == "still here"
