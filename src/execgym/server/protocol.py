"""uvicorn's HTTP/1.1 protocol with a deadline on request headers, for ``execgym serve``.

uvicorn has no timeout for a request's headers (its issue #157, "--timeout-request-start",
is open): a connection that sends nothing, or trickles its headers a byte at a time,
is kept forever, since its keep-alive timer is only armed after a response and is
cancelled by every byte received. Enough such connections use up the server's file
descriptors, and authenticated clients can no longer connect. ASGI middleware cannot
help: the app is only called once the headers are complete. (The body has its own
limits, in :class:`execgym.server.middleware.BodyLimit`.)

:func:`header_deadline_protocol` builds a subclass of uvicorn's h11 protocol that
closes a connection whose request headers are not complete ``timeout_s`` after it
opened or after its previous response ended.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol


class _HeaderDeadline(H11Protocol):
    """H11Protocol that closes a connection waiting too long for request headers."""

    header_timeout_s = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._waiting_for: object = None

    def _arm(self) -> None:
        self._disarm()
        self._waiting_for = self.cycle  # a new request makes a new cycle
        self._deadline = self.loop.call_later(self.header_timeout_s, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.cycle is self._waiting_for and not self.transport.is_closing():
            self.logger.info(
                "closing a connection from %s: no complete request headers within %g s",
                self.client,
                self.header_timeout_s,
            )
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Open the connection and start waiting for its first request's headers."""
        super().connection_made(transport)
        self._arm()

    def on_response_complete(self) -> None:
        """After a response, the next request's headers are due within the deadline.

        Armed before uvicorn goes on to a pipelined request, whose new cycle then
        disarms it in effect (see :meth:`_expired`).
        """
        if not self.transport.is_closing():
            self._arm()
        super().on_response_complete()

    def handle_websocket_upgrade(self, event: Any) -> None:
        """The connection becomes a WebSocket: no HTTP deadline applies any more."""
        self._disarm()
        super().handle_websocket_upgrade(event)

    def connection_lost(self, exc: Exception | None) -> None:
        """Stop the timer with the connection."""
        self._disarm()
        super().connection_lost(exc)


def header_deadline_protocol(timeout_s: float) -> type[H11Protocol]:
    """The h11 protocol of uvicorn, closing connections without headers in ``timeout_s``.

    Pass it as ``uvicorn.run(..., http=header_deadline_protocol(10.0))``.

    Args:
        timeout_s: Seconds a connection may take to send a request's headers, from
            when it opens or its previous response ends.
    """
    return type("HeaderDeadlineProtocol", (_HeaderDeadline,), {"header_timeout_s": timeout_s})
