"""The result of scoring one rollout, :class:`ScoredRollout`, and its JSON form.

A result is written as one line of the results JSONL (:meth:`ScoredRollout.to_json`)
and read back from it (:meth:`ScoredRollout.from_json`) by whoever receives it over a
wire: the broker's results, a job's stored results. Both directions are written here,
side by side, so a field added to one is added to the other; a test round-trips every
kind of result.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from execgym.judges.base import ErrorDetail, Judgement, Verdict
from execgym.sandbox.base import RunResult, Status

if TYPE_CHECKING:  # imported where a result has them: a plain batch's never do
    from execgym.judges.diagnosis import Diagnostics
    from execgym.reward import RewardBreakdown

TAIL_BYTES = 2000
"""How much of the end of stdout and stderr each result keeps."""


@dataclass(frozen=True, slots=True)
class ScoredRollout:
    """The result for one rollout: one line of the results JSONL.

    Attributes:
        index: 0-based position of the rollout in its input (its line among non-blank
            lines), so results can always be matched to rollouts.
        task_id: The task.
        rollout_id: The caller's id, or ``"<task_id>#<index>"`` when none was given.
        verdict: The outcome.
        reward: 1.0 or 0.0; ``None`` when masked (``sandbox_error``, ``invalid``,
            ``language_unavailable``, ``quarantined``).
        judgement: The judge's evidence (``None`` for invalid input).
        isolation: The sandbox backend, ``"none"`` when not isolated.
        attempts: Sandbox runs made (2 when a sandbox error was retried).
        message: Why, for humans.
        reward_breakdown: Every component of the reward, when the scorer has a
            :class:`~execgym.reward.RewardSpec` (``reward`` is then its total).
        limits: The effective limits it ran under
            (:func:`~execgym.judges.effective.effective_limits`: the run's, after the
            task's overrides and its per-case rule, with the stack and compile limits
            where they apply); ``None`` when it was not judged.
        calibration: The calibrated time limits it ran under
            (:meth:`~execgym.calibration.Calibration.to_json`), when calibrated.
    """

    index: int
    task_id: str
    rollout_id: str
    verdict: Verdict
    reward: float | None
    judgement: Judgement | None
    isolation: str
    attempts: int = 1
    message: str = ""
    reward_breakdown: RewardBreakdown | None = None
    limits: Mapping[str, Any] | None = None
    calibration: Mapping[str, Any] | None = None

    @property
    def diagnostics(self) -> Diagnostics | None:
        """Leaks, hot spots and complexity (``judgement.diagnostics``), when it got any."""
        return self.judgement.diagnostics if self.judgement is not None else None

    def to_json(self) -> dict[str, Any]:
        """The JSON object written to the results file (one line per rollout).

        The run's output is kept as its last :data:`TAIL_BYTES` bytes, as text
        (undecodable bytes replaced by U+FFFD); times are rounded to 0.1 ms. The run's
        :class:`~execgym.sandbox.Status` is not in it (see :meth:`from_json`).
        """
        run = self.judgement.run if self.judgement else None
        error = self.judgement.error if self.judgement else None
        return {
            "index": self.index,
            "task_id": self.task_id,
            "rollout_id": self.rollout_id,
            "verdict": self.verdict.value,
            "reward": self.reward,
            "wall_time_s": round(run.wall_time_s, 4) if run else None,
            "cpu_time_s": round(run.cpu_time_s, 4) if run else None,
            "peak_memory_bytes": run.peak_memory_bytes if run else None,
            "processes_started": run.processes_started if run else None,
            "bytes_written": run.bytes_written if run else None,
            "exit_code": run.exit_code if run else None,
            "signal": run.signal if run else None,
            "limit_hit": run.limit_hit if run else None,
            "stdout_tail": _tail(run.stdout) if run else "",
            "stderr_tail": _tail(run.stderr) if run else "",
            "stdout_truncated": run.stdout_truncated if run else False,
            "stderr_truncated": run.stderr_truncated if run else False,
            "error": None
            if error is None
            else {"type": error.type, "message": error.message, "traceback": error.traceback},
            "message": self.message,
            "isolation": self.isolation,
            "enforcement": dict(run.enforcement) if run else {},
            "limits": dict(self.limits) if self.limits is not None else None,
            **({"calibration": dict(self.calibration)} if self.calibration is not None else {}),
            "attempts": self.attempts,
            "details": dict(self.judgement.details) if self.judgement else {},
            **(
                {"reward_breakdown": self.reward_breakdown.to_json()}
                if self.reward_breakdown is not None
                else {}
            ),
            **({"diagnostics": self.diagnostics.to_json()} if self.diagnostics else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], run_status: str | None = None) -> ScoredRollout:
        """The result that :meth:`to_json` wrote as ``data``.

        ``from_json(r.to_json(), status).to_json() == r.to_json()`` for every result;
        the result itself comes back equal when its run held no more than the JSON
        keeps (its output within :data:`TAIL_BYTES`, no report, no run message).

        Args:
            data: A results line, as :meth:`to_json` made it.
            run_status: The run's :class:`~execgym.sandbox.Status` value (the broker's
                result message carries it beside the line); ``None``: the result has
                no run (nothing ran, or the status is unknown).

        Raises:
            ValueError: naming the field that is missing or of the wrong kind.
        """
        try:
            return _from_json(data, run_status)
        except KeyError as error:
            raise ValueError(f"a result line lacks the field {error}") from None
        except (TypeError, AttributeError) as error:
            raise ValueError(f"a result line has a field of the wrong kind: {error}") from None

    def with_output_tail(self, size: int) -> ScoredRollout:
        """This result, keeping only the last ``size`` bytes of the run's stdout and stderr.

        What the results file shows is unchanged (it keeps :data:`TAIL_BYTES`, and
        ``stdout_truncated`` / ``stderr_truncated`` still say whether the program wrote
        more than its output limit); only the memory a held result takes shrinks.
        """
        judgement = self.judgement
        run = judgement.run if judgement else None
        if judgement is None or run is None:
            return self
        if len(run.stdout) <= size and len(run.stderr) <= size:
            return self
        run = dataclasses.replace(
            run,
            stdout=run.stdout[max(0, len(run.stdout) - size) :],
            stderr=run.stderr[max(0, len(run.stderr) - size) :],
        )
        return dataclasses.replace(self, judgement=dataclasses.replace(judgement, run=run))


def _from_json(data: Mapping[str, Any], run_status: str | None) -> ScoredRollout:
    verdict = Verdict(data["verdict"])
    run = None
    if run_status is not None:
        run = RunResult(
            status=Status(run_status),
            exit_code=data["exit_code"],
            signal=data["signal"],
            stdout=_tail_bytes(data["stdout_tail"]),
            stderr=_tail_bytes(data["stderr_tail"]),
            stdout_truncated=data["stdout_truncated"],
            stderr_truncated=data["stderr_truncated"],
            wall_time_s=data["wall_time_s"],
            cpu_time_s=data["cpu_time_s"],
            peak_memory_bytes=data["peak_memory_bytes"],
            processes_started=data.get("processes_started"),
            bytes_written=data.get("bytes_written"),
            isolation=data["isolation"],
            limit_hit=data["limit_hit"],
            enforcement=dict(data["enforcement"]),
        )
    error = data["error"]
    breakdown = data.get("reward_breakdown")
    limits, calibration = data.get("limits"), data.get("calibration")
    diagnostics = data.get("diagnostics")
    if diagnostics is not None:
        from execgym.judges.diagnosis import Diagnostics
    if breakdown is not None:
        from execgym.reward import RewardBreakdown
    judgement = Judgement(
        verdict,
        run=run,
        error=ErrorDetail(error["type"], error["message"], error["traceback"]) if error else None,
        message=data["message"],
        details=dict(data["details"]),
        diagnostics=Diagnostics.from_json(diagnostics) if diagnostics is not None else None,
    )
    return ScoredRollout(
        index=data["index"],
        task_id=data["task_id"],
        rollout_id=data["rollout_id"],
        verdict=verdict,
        reward=data["reward"],
        judgement=judgement,
        isolation=data["isolation"],
        attempts=data["attempts"],
        message=data["message"],
        reward_breakdown=RewardBreakdown.from_json(breakdown) if breakdown is not None else None,
        limits=dict(limits) if limits is not None else None,
        calibration=dict(calibration) if calibration is not None else None,
    )


def _tail(data: bytes) -> str:
    return data[-TAIL_BYTES:].decode("utf-8", errors="replace")


def _tail_bytes(text: str) -> bytes:
    """Bytes whose :func:`_tail` is ``text`` (a tail :func:`_tail` made).

    Each U+FFFD becomes one byte that is never valid UTF-8, so decoding gives it back,
    and the bytes are never longer than those the tail was cut from.
    """
    return b"\xff".join(part.encode("utf-8") for part in text.split("\ufffd"))


def invalid_result(
    index: int, task_id: str, rollout_id: str, message: str, isolation: str
) -> ScoredRollout:
    """The ``invalid`` result (masked, nothing run) of unusable input, saying why."""
    return ScoredRollout(
        index,
        task_id,
        rollout_id,
        Verdict.INVALID,
        None,
        Judgement(Verdict.INVALID, message=message, error=ErrorDetail("InvalidInput", message)),
        isolation,
        attempts=0,
        message=message,
    )
