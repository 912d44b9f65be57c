"""ASGI middleware: request bodies (token first, 401; size, 413; rate, 408) and metrics."""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from execgym.server.metrics import Metrics

UNAUTHORIZED = {
    "error": "http_401",
    "message": "a valid bearer token is required: send 'Authorization: Bearer <token>'",
}
"""The 401 body, the same as the routes' own check answers."""


async def _send_json(
    send: Send, status: int, body: dict[str, Any], extra: dict[bytes, bytes] | None = None
) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                (b"connection", b"close"),
                *(extra or {}).items(),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


class BodyLimit:
    """Reads a request body only for a caller with the token, only so big, only so slowly.

    In this order, before the app sees the request:

    1. **Token first.** A request that carries a body (``Content-Length`` above 0 or
       ``Transfer-Encoding``) without the bearer token gets 401 from its headers
       alone: not one byte of its body is read, so unauthenticated clients cannot make
       the server buffer anything (uvicorn stops reading a socket whose unread body
       passes 64 KiB). Requests without a body are left to the routes' own check.
    2. **Size.** A declared ``Content-Length`` above ``max_bytes`` gets 413 at once; a
       chunked body is counted while read and gets 413 as soon as it passes.
    3. **Rate.** A body whose next bytes take longer than ``idle_timeout_s``, or that
       arrives slower on average than ``min_rate_bytes_per_s`` once ``idle_timeout_s``
       has passed, gets 408 (a trickling client would hold its connection forever).

    Every refusal closes the connection (``Connection: close``). The body is then
    replayed to the app.

    Args:
        app: The app to protect.
        max_bytes: Largest body accepted, in bytes.
        token: The bearer token, or ``None`` when authentication is off.
        idle_timeout_s: Longest wait for the next part of a body, in seconds; also the
            grace period before the average rate is checked.
        min_rate_bytes_per_s: Slowest average body rate accepted after the grace
            period, in bytes per second.
        max_batch: Most rollouts in one ``POST /v1/score`` (said in its 413 answer).
    """

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        *,
        token: str | None = None,
        idle_timeout_s: float = 10.0,
        min_rate_bytes_per_s: int = 16 * 1024,
        max_batch: int | None = None,
    ) -> None:
        self.max_batch = max_batch
        self.app = app
        self.max_bytes = max_bytes
        self.token = token
        self.idle_timeout_s = idle_timeout_s
        self.min_rate_bytes_per_s = min_rate_bytes_per_s

    def _too_large(self, path: str, size: int | None) -> dict[str, Any]:
        given = f" ({size} bytes)" if size is not None else ""
        how = "send a smaller body"
        if path.rstrip("/") == "/v1/score":
            most = f" and at most {self.max_batch} rollouts" if self.max_batch else ""
            how = (
                "split the batch's rollouts into several POST /v1/score requests, each "
                f'under the limit{most} ("stream": true answers each with a line per '
                "result), or score a rollouts file with `execgym score` (--broker to use "
                "workers), which reads it line by line whatever its size"
            )
        return {
            "error": "request_too_large",
            "message": f"the request body{given} is larger than this server's limit of "
            f"{self.max_bytes} bytes ({self.max_bytes / 2**20:.4g} MiB: execgym serve "
            f"--max-body, EXECGYM_SERVER_MAX_BODY_BYTES); {how}; or ask the operator to "
            "raise the limit",
        }

    def _too_slow(self, size: int, elapsed_s: float) -> dict[str, Any]:
        return {
            "error": "request_timeout",
            "message": f"the request body arrived too slowly ({size} bytes in "
            f"{elapsed_s:.1f} s): this server waits at most {self.idle_timeout_s:g} s for "
            f"the next bytes and needs at least {self.min_rate_bytes_per_s} bytes/s on "
            f"average after the first {self.idle_timeout_s:g} s "
            "(EXECGYM_SERVER_BODY_IDLE_TIMEOUT_S, EXECGYM_SERVER_MIN_BODY_RATE_BYTES_PER_S)",
        }

    def _authorized(self, headers: dict[bytes, bytes]) -> bool:
        if self.token is None:
            return True
        scheme, _, given = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            given.encode(), self.token.encode()
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one ASGI connection."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        has_body = b"transfer-encoding" in headers or (
            declared is not None and declared.strip() not in (b"", b"0")
        )
        if has_body and not self._authorized(headers):
            await _send_json(send, 401, UNAUTHORIZED, {b"www-authenticate": b"Bearer"})
            return
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await _send_json(send, 413, self._too_large(scope.get("path", ""), int(declared)))
            return
        body = await self._read(receive, send, scope.get("path", ""))
        if body is None:
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed, body
            if not replayed:
                replayed = True
                given, body = body, b""  # not held here for a (streamed) response's life
                return {"type": "http.request", "body": given, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _read(self, receive: Receive, send: Send, path: str) -> bytes | None:
        """The whole body, or ``None`` once a refusal was sent (or the client left)."""
        chunks: list[bytes] = []
        size = 0
        started = time.monotonic()
        while True:
            # The average rate falls below the minimum at started + size / rate, but
            # never before the grace period; the next bytes are due within the idle
            # timeout either way.
            due = started + max(self.idle_timeout_s, size / self.min_rate_bytes_per_s)
            wait_s = min(self.idle_timeout_s, due - time.monotonic())
            try:
                if wait_s <= 0:
                    raise TimeoutError
                async with asyncio.timeout(wait_s):
                    message = await receive()
            except TimeoutError:
                await _send_json(send, 408, self._too_slow(size, time.monotonic() - started))
                return None
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await _send_json(send, 413, self._too_large(path, None))
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


class RequestMetrics:
    """Counts requests and times them, labelled with the route's path template."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one ASGI connection."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", "unmatched")
            self.metrics.requests.labels(path, scope["method"], str(status)).inc()
            self.metrics.request_seconds.labels(path).observe(time.monotonic() - started)
