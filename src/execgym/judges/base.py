"""What a judge says about one rollout: a :class:`Verdict` and its evidence."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from execgym.sandbox.base import RunResult


class Verdict(enum.Enum):
    """The outcome of one rollout.

    ``SANDBOX_ERROR`` and ``INVALID`` are not the model's fault: their reward is
    ``None`` (masked), never 0.
    """

    PASSED = "passed"  # every test passed
    FAILED = "failed"  # an assertion failed
    ERROR = "error"  # another exception (type, message and traceback are kept)
    TAMPERED = "tampered"  # a detected hack (a forged answer, an always-equal object)
    TIMEOUT = "timeout"  # wall-clock or CPU budget spent
    MEMORY_EXCEEDED = "memory_exceeded"  # past its memory limit
    OUTPUT_EXCEEDED = "output_exceeded"  # wrote more than max_output_bytes
    SANDBOX_ERROR = "sandbox_error"  # we failed to run it; retried once, then masked
    INVALID = "invalid"  # the input was unusable (unknown task, malformed line)

    @property
    def is_masked(self) -> bool:
        """Whether this verdict carries no reward (our fault or bad input)."""
        return self in (Verdict.SANDBOX_ERROR, Verdict.INVALID)


@dataclass(frozen=True, slots=True)
class ErrorDetail:
    """The exception a program raised: class name, message and traceback text."""

    type: str
    message: str
    traceback: str = ""


@dataclass(frozen=True, slots=True)
class Judgement:
    """A judge's verdict on one rollout, with the run that produced it.

    Attributes:
        verdict: The outcome.
        run: The sandbox run, or ``None`` when nothing ran (invalid input).
        error: The exception raised, for ``failed`` and ``error`` verdicts.
        message: A short explanation for humans.
        details: Judge-specific extra facts (JSON-serialisable).
    """

    verdict: Verdict
    run: RunResult | None = None
    error: ErrorDetail | None = None
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)
