"""The request body is read only for a caller with the token, only so big, only so slowly.

Issue 18 kind 5: ``execgym serve`` read every body (up to 64 MiB) before checking the
token, so eight unauthenticated connections took the server from 68 to ~590 MiB, and
a client trickling a body stayed connected indefinitely. These drive the middleware
directly with ASGI messages, so what is read is counted exactly; the real server over
TCP is in ``test_serve_load.py``.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

import pytest
from click.testing import CliRunner

from execgym.cli import main
from execgym.cli.serve import check_exposure, is_loopback
from execgym.server.middleware import BodyLimit
from execgym.server.settings import ServerSettings

TOKEN = "s3cret"


class Recorder:
    """An ASGI receive that hands out a script of body parts and counts what it gave."""

    def __init__(self, parts: list[bytes], *, gap_s: float = 0.0, forever: bool = False) -> None:
        self.parts = parts
        self.gap_s = gap_s
        self.forever = forever
        self.given = 0
        self.calls = 0

    async def __call__(self) -> dict[str, Any]:
        self.calls += 1
        if self.gap_s:
            await asyncio.sleep(self.gap_s)
        if self.forever:
            self.given += 1
            return {"type": "http.request", "body": b"x", "more_body": True}
        part = self.parts.pop(0)
        self.given += len(part)
        return {"type": "http.request", "body": part, "more_body": bool(self.parts)}


async def call(
    guard: BodyLimit, receive: Recorder, headers: dict[str, str]
) -> tuple[int, dict[str, Any], dict[str, str], bytes | None]:
    """Run one request through ``guard``; the status, JSON body, headers, and the body
    the app saw (``None`` when the app was not called)."""
    sent: list[dict[str, Any]] = []
    seen: list[bytes] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        message = await receive()
        seen.append(message["body"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    guard.app = app
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/run_code",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
    }
    await guard(scope, receive, send)
    start, body = sent[0], sent[1]
    answer_headers = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], json.loads(body["body"]), answer_headers, seen[0] if seen else None


def guard(**kwargs: Any) -> BodyLimit:
    settings = {"max_bytes": 1 << 20, "token": TOKEN, "idle_timeout_s": 0.3}
    return BodyLimit(None, **{**settings, **kwargs})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "headers",
    [
        {"content-length": str(62 << 20)},  # the field case: 62 MiB declared
        {"content-length": "100"},
        {"transfer-encoding": "chunked"},
        {"content-length": "100", "authorization": "Bearer wrong"},
        {"content-length": "100", "authorization": f"Basic {TOKEN}"},
        {"content-length": "100", "authorization": TOKEN},
    ],
)
async def test_no_byte_of_an_unauthenticated_body_is_read(headers: dict[str, str]) -> None:
    receive = Recorder([b"x" * 100])
    status, body, answer_headers, seen = await call(guard(), receive, headers)
    assert status == 401
    assert receive.calls == 0
    assert seen is None
    assert "Authorization: Bearer <token>" in body["message"]
    assert answer_headers["connection"] == "close"
    assert answer_headers["www-authenticate"] == "Bearer"


async def test_an_authenticated_body_reaches_the_app_whole() -> None:
    receive = Recorder([b"a" * 10, b"b" * 10])
    headers = {"transfer-encoding": "chunked", "authorization": f"Bearer {TOKEN}"}
    status, _, _, seen = await call(guard(), receive, headers)
    assert status == 200
    assert seen == b"a" * 10 + b"b" * 10


async def test_without_a_token_bodies_are_read_as_before() -> None:
    receive = Recorder([b"{}"])
    status, _, _, seen = await call(guard(token=None), receive, {"content-length": "2"})
    assert (status, seen) == (200, b"{}")


async def test_oversized_bodies_get_413_declared_up_front_and_chunked_by_counting() -> None:
    auth = {"authorization": f"Bearer {TOKEN}"}
    receive = Recorder([b"x" * 2000])
    status, body, _, _ = await call(
        guard(max_bytes=1000), receive, {**auth, "content-length": "2000"}
    )
    assert (status, receive.calls) == (413, 0)
    assert "limit of 1000 bytes" in body["message"]
    assert "EXECGYM_SERVER_MAX_BODY_BYTES" in body["message"]
    receive = Recorder([b"x" * 600, b"x" * 600, b"x" * 600])
    status, _, _, seen = await call(
        guard(max_bytes=1000), receive, {**auth, "transfer-encoding": "chunked"}
    )
    assert (status, seen, receive.given) == (413, None, 1200)  # stopped at the limit


async def test_a_stalled_body_gets_408_after_the_idle_timeout() -> None:
    receive = Recorder([b"x" * 10, b"never"], gap_s=0)
    original = receive.__call__

    async def stall() -> dict[str, Any]:
        if receive.calls >= 1:
            await asyncio.sleep(3600)
        return await original()

    headers = {"content-length": "100", "authorization": f"Bearer {TOKEN}"}
    started = time.monotonic()
    status, body, answer_headers, seen = await call(guard(), stall, headers)  # type: ignore[arg-type]
    elapsed_s = time.monotonic() - started
    assert (status, seen) == (408, None)
    assert 0.25 <= elapsed_s < 5
    assert re.search(r"10 bytes in \d+\.\d s", body["message"]), body["message"]
    assert "EXECGYM_SERVER_BODY_IDLE_TIMEOUT_S" in body["message"]
    assert answer_headers["connection"] == "close"


async def test_a_trickled_body_gets_408_once_its_average_rate_is_too_low() -> None:
    # One byte every 0.05 s never trips the 0.3 s idle timeout: the rate does.
    receive = Recorder([], gap_s=0.05, forever=True)
    headers = {"transfer-encoding": "chunked", "authorization": f"Bearer {TOKEN}"}
    started = time.monotonic()
    status, _, _, _ = await call(guard(min_rate_bytes_per_s=1000), receive, headers)
    assert status == 408
    assert time.monotonic() - started < 5
    assert receive.given < 100


async def test_a_fast_enough_body_is_not_cut_by_the_rate_check() -> None:
    # 150 parts of 1 KiB, 0.01 s apart (~100 KiB/s): well past the grace period, and
    # ten times the minimum rate.
    receive = Recorder([b"x" * 1024] * 150, gap_s=0.01)
    headers = {"transfer-encoding": "chunked", "authorization": f"Bearer {TOKEN}"}
    status, _, _, seen = await call(
        guard(idle_timeout_s=0.5, min_rate_bytes_per_s=10_000), receive, headers
    )
    assert status == 200
    assert seen is not None
    assert len(seen) == 150 * 1024


def test_the_limits_are_settings_read_from_the_environment() -> None:
    settings = ServerSettings.from_env(
        {
            "EXECGYM_SERVER_MAX_BODY_BYTES": "8MiB",
            "EXECGYM_SERVER_BODY_IDLE_TIMEOUT_S": "2.5",
            "EXECGYM_SERVER_MIN_BODY_RATE_BYTES_PER_S": "1024",
            "EXECGYM_SERVER_ALLOW_NO_TOKEN": "yes",
        }
    )
    assert settings.max_body_bytes == 8 << 20
    assert settings.body_idle_timeout_s == 2.5
    assert settings.min_body_rate_bytes_per_s == 1024
    assert settings.allow_no_token is True


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.7"])
def test_serving_beyond_loopback_without_a_token_is_refused(
    host: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("EXECGYM_SERVER_TOKEN", raising=False)
    result = CliRunner().invoke(main, ["serve", "--host", host, "--port", "1"])
    assert result.exit_code == 2, result.output
    assert "no token is set" in result.stderr
    assert "--allow-no-token" in result.stderr


def test_loopback_needs_no_token_and_the_allowance_warns(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert is_loopback("127.0.0.1")
    assert is_loopback("localhost")
    assert is_loopback("::1")
    assert not is_loopback("0.0.0.0")
    check_exposure("127.0.0.1", None, allowed=False)  # no error
    check_exposure("0.0.0.0", "token", allowed=False)
    check_exposure("0.0.0.0", None, allowed=True)
    assert "WARNING" in capsys.readouterr().err
