"""Whose fault is a failure: the one place that decides which results are masked.

**The rule.** A result is masked (reward ``None``: "leave this sample out") only when
the fault is *provably ours*: the host, the sandbox, a toolchain, execgym's own code,
or the task's own tests. It is never masked when anything the rollout controls can
trigger it: its output, its return values, the exceptions it raises, its file names,
its exit behaviour, the resources it uses, what it writes to disk. Anything the rollout
caused is ``failed``, ``error``, ``tampered`` (or a limit's verdict), with a reward,
and a clear reason. When in doubt, the failure is the rollout's: a mask a rollout can
trigger is a reward it can buy (RL reads ``None`` as "not the model's fault" and
learns to reach it whenever the honest answer would score 0).

What proves a fault ours, verdict by verdict (:data:`MASKED`):

- ``sandbox_error`` (:attr:`Fault.HOST`): the sandbox reported its own failure
  (:attr:`~execgym.sandbox.Status.SANDBOX_ERROR`: bwrap, setpriv, cgroups or mounts
  failed), or the harness's start marker never arrived (it precedes every byte of the
  rollout's code, see :func:`~execgym.judges.base.never_started`), or the harness
  failed before the rollout's code existed (pytest not importable). An exception in
  execgym's own host code is masked too (a bug of ours must not punish a correct
  answer), but as it may have been *triggered* by the rollout's data it never counts
  as an infrastructure failure (:func:`counts_toward_breaker`), and each one a
  rollout can trigger is a hole to close at its root.
- ``language_unavailable`` (:attr:`Fault.TOOLCHAIN`): no working toolchain, found by
  running a known-good program of execgym's, never the rollout's.
- ``invalid`` (:attr:`Fault.TASK` or :attr:`Fault.INPUT`): the task's own material is
  unusable, decided from the task alone before or without the rollout (tests that do
  not compile, a suite with no test in it, limits out of bounds), or the input line is
  unusable (unknown ``task_id``, malformed JSON).
- ``quarantined`` (:attr:`Fault.HOST`): not run, as the task type's circuit breaker is
  open, which only infrastructure failures open (:func:`counts_toward_breaker`).

The judges build their verdicts with this rule; the scorer (:mod:`execgym.scoring`),
the reward (:func:`~execgym.reward.binary_reward`, :func:`~execgym.reward.evaluate`),
the breakers (:mod:`execgym.ops.breakers`), the worker and the metrics ask this module,
through :attr:`~execgym.judges.base.Verdict.is_masked`, :func:`is_masked` and
:func:`counts_toward_breaker`. SECURITY.md ("Verdicts of rollout-controlled failures")
lists, judge by judge, the failures a rollout controls and the verdict each gets.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # judges.base imports this module's rule lazily, from Verdict.is_masked
    from execgym.judges.base import Judgement, Verdict


class Fault(enum.Enum):
    """Who is to blame for a result; only :attr:`ROLLOUT` results carry a reward."""

    ROLLOUT = "rollout"  # anything the rollout controls: scored, never masked
    HOST = "host"  # the sandbox, the host or execgym's own code
    TOOLCHAIN = "toolchain"  # no working compiler or interpreter for the language here
    TASK = "task"  # the task's own tests or settings are unusable
    INPUT = "input"  # the input line itself (unknown task_id, malformed JSON)


INFRASTRUCTURE_MARK = "infrastructure"
"""``Judgement.details`` key set by a judge that proved its ``sandbox_error`` is the
infrastructure's (the harness never started, or failed before the rollout's code
existed); its value says how."""


def _masked() -> dict[Verdict, Fault]:
    from execgym.judges.base import Verdict

    return {
        Verdict.SANDBOX_ERROR: Fault.HOST,
        Verdict.LANGUAGE_UNAVAILABLE: Fault.TOOLCHAIN,
        Verdict.INVALID: Fault.TASK,
        Verdict.QUARANTINED: Fault.HOST,
    }


def fault_of(verdict: Verdict) -> Fault:
    """Whose fault a result with ``verdict`` is (see the module docstring).

    ``invalid`` is :attr:`Fault.TASK` here; an ``invalid`` result for an unusable input
    line is :attr:`Fault.INPUT`, which masks the same way.
    """
    return _masked().get(verdict, Fault.ROLLOUT)


def is_masked(verdict: Verdict) -> bool:
    """Whether a result with ``verdict`` carries no reward (``None``): not the rollout's fault."""
    return fault_of(verdict) is not Fault.ROLLOUT


def counts_toward_breaker(judgement: Judgement) -> bool:
    """Whether ``judgement`` is an infrastructure failure a circuit breaker may count.

    Only a ``sandbox_error`` whose run proves the infrastructure failed: the sandbox
    reported its own failure (``Status.SANDBOX_ERROR``), or the judge marked it with
    :data:`INFRASTRUCTURE_MARK` (the harness never started, or failed before the
    rollout's code existed). Never a failure the rollout could have caused, even one
    that is masked: a task's checker crashing on the rollout's output, an exception of
    execgym's host code on the rollout's data (no run to prove anything), a verdict of
    the rollout's own. Otherwise five garbage rollouts could quarantine a whole data set.
    """
    from execgym.judges.base import Verdict
    from execgym.sandbox.base import Status

    if judgement.verdict is not Verdict.SANDBOX_ERROR or judgement.run is None:
        return False
    return judgement.run.status is Status.SANDBOX_ERROR or bool(
        judgement.details.get(INFRASTRUCTURE_MARK)
    )
