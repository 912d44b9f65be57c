"""Test doubles shipped with execgym, for users' tests and ours: no privileges needed.

>>> import asyncio
>>> from execgym.testing import FakeSandbox, fake_result
>>> box = FakeSandbox([fake_result()])
>>> asyncio.run(box.run(["anything"])).status.value
'ok'
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from execgym.judges.languages import KNOWN_GOOD
from execgym.limits import DEFAULT_LIMITS, Limits
from execgym.sandbox.base import RunResult, Status


def fake_result(status: Status = Status.OK, **fields: Any) -> RunResult:
    """A :class:`RunResult` with harmless defaults; ``fields`` override any attribute."""
    base = RunResult(
        status=status,
        exit_code=0 if status is Status.OK else None,
        signal=None,
        stdout=b"",
        stderr=b"",
        stdout_truncated=False,
        stderr_truncated=False,
        wall_time_s=0.01,
        cpu_time_s=0.01,
        peak_memory_bytes=1 << 20,
        isolation="fake",
    )
    return replace(base, **fields)


@dataclass(frozen=True, slots=True)
class FakeCall:
    """One call made to a :class:`FakeSandbox`, for assertions."""

    argv: Sequence[str]
    stdin: bytes
    files: Mapping[str, bytes]
    limits: Limits
    want_report: bool


@dataclass
class FakeSandbox:
    """A sandbox that runs nothing and returns scripted results, in order.

    Args:
        results: The results to return, one per call; or a function of the call. When a
            list runs out, the last result repeats.

    Attributes:
        calls: Every call made, in order.
    """

    results: Sequence[RunResult] | Callable[[FakeCall], RunResult]
    name: str = "fake"
    calls: list[FakeCall] = field(default_factory=list)

    async def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes = b"",
        files: Mapping[str, bytes] | None = None,
        limits: Limits = DEFAULT_LIMITS,
        env: Mapping[str, str] | None = None,
        want_report: bool = False,
    ) -> RunResult:
        """Record the call and return the next scripted result."""
        call = FakeCall(list(argv), stdin, dict(files or {}), limits, want_report)
        self.calls.append(call)
        if callable(self.results):
            return self.results(call)
        scripted: Iterable[RunResult] = self.results
        ordered = list(scripted)
        return ordered[min(len(self.calls), len(ordered)) - 1]

    async def run_python(
        self,
        source: bytes,
        *,
        stdin: bytes = b"",
        files: Mapping[str, bytes] | None = None,
        limits: Limits = DEFAULT_LIMITS,
        env: Mapping[str, str] | None = None,
        want_report: bool = False,
    ) -> RunResult:
        """Record the call as ``python runner.py`` and return the next scripted result."""
        return await self.run(
            ["python", "runner.py"],
            stdin=stdin,
            files={**(files or {}), "runner.py": source},
            limits=limits,
            env=env,
            want_report=want_report,
        )


SUM_OF_TWO = KNOWN_GOOD
"""A program per language that reads two integers and prints their sum (known good)."""
