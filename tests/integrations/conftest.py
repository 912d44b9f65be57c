"""Fixtures of the adapters' tests: a real ``execgym serve`` for the remote modes."""

from __future__ import annotations

from tests.server.test_serve import server

__all__ = ["server"]
