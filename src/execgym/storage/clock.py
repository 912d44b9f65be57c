"""Time for the store: one injectable clock, so tests of lifecycle rules never sleep."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]
"""``() -> datetime``: now, timezone-aware (UTC)."""


def utc_now() -> datetime:
    """Now, in UTC: the default :data:`Clock`."""
    return datetime.now(UTC)


def format_time(moment: datetime) -> str:
    """``2026-12-01T13:30:18.123456Z``: the one way times are written in the store."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
