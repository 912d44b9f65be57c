"""Score one judged rollout under a :class:`~execgym.reward.spec.RewardSpec`.

Correctness and efficiency read the judge's report; static analysis, complexity and
security read the program as text (on the host, in a thread); penalties call the
user's function on the completion's text.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import warnings
from typing import Any

from execgym.errors import ConfigError
from execgym.judges.assert_tests import build_program
from execgym.judges.base import Judgement, Verdict
from execgym.reward.combine import ComponentScore, RewardBreakdown, combine
from execgym.reward.spec import (
    Complexity,
    Correctness,
    Coverage,
    Efficiency,
    Leak,
    Penalty,
    RewardSpec,
    Scaling,
    Security,
    Static,
)
from execgym.reward.static import Measured, complexity_score, security_score, static_score
from execgym.tasks.models import Task

log = logging.getLogger(__name__)

_TOOLS = {
    Coverage: ("coverage",),
    Static: ("ruff",),
    Complexity: ("radon.complexity", "radon.metrics"),
    Security: ("bandit.core.manager", "bandit.core.config"),
}


def check_tools(spec: RewardSpec) -> None:
    """Fail early if a component's tool is not installed.

    Raises:
        ConfigError: naming the tool and how to install it.
    """
    for component in spec.components:
        for module in _TOOLS.get(type(component), ()):
            try:  # imported here, once, in the main thread: bandit's plugins warn on load
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    logging.getLogger("stevedore").setLevel(logging.CRITICAL)
                    importlib.import_module(module)
            except ImportError as error:
                tool = module.split(".")[0]
                raise ConfigError(
                    f"the {component.kind} reward component needs {tool}: "
                    "pip install 'execgym[rewards]'"
                ) from error


def correctness_score(judgement: Judgement, spec: Correctness) -> Measured:
    """The :class:`~execgym.reward.spec.Correctness` component."""
    if judgement.verdict is Verdict.PASSED:
        return Measured(1.0, "every test passed")
    if spec.mode == "fraction":
        passed = judgement.details.get("cases_passed")
        total = judgement.details.get("cases_total")
        if isinstance(passed, int) and isinstance(total, int) and total > 0:
            return Measured(passed / total, f"{passed} of {total} cases passed")
    return Measured(0.0, judgement.verdict.value)


def efficiency_score(judgement: Judgement, spec: Efficiency) -> Measured:
    """The :class:`~execgym.reward.spec.Efficiency` component (from the judge's report)."""
    details = judgement.details
    needed = ("cpu_s", "maxrss_kb", "reference_cpu_s", "reference_maxrss_kb")
    values = [details.get(key) for key in needed]
    if details.get("reference_verdict") != "passed" or not all(
        isinstance(v, int | float) and v > 0 for v in values
    ):
        return Measured(None, "no measured reference for this task")
    cpu, rss, ref_cpu, ref_rss = (float(v) for v in values)  # type: ignore[arg-type]
    time_ratio = max(ref_cpu, spec.min_cpu_s) / max(cpu, spec.min_cpu_s)
    memory_ratio = ref_rss / rss
    score = 0.5 * min(1.0, time_ratio) + 0.5 * min(1.0, memory_ratio)
    detail = (
        f"CPU {cpu * 1000:.1f} ms vs reference {ref_cpu * 1000:.1f} ms; "
        f"peak memory {rss / 1024:.1f} MiB vs {ref_rss / 1024:.1f} MiB"
    )
    return Measured(score, detail)


def _diagnosed(judgement: Judgement, check: str) -> tuple[Measured | None, Any]:
    """``(Measured if the check gives no figure, else None, its section)``."""
    diagnostics = getattr(judgement, "diagnostics", None)
    section = getattr(diagnostics, check, None) if diagnostics is not None else None
    if section is None:
        return Measured(None, f"{check} not diagnosed"), None
    if section.status == "not_applicable":
        return Measured(None, f"{check}: {section.reason}"), None
    if section.status == "failed":
        if section.fault == "host":  # ours, proven: left out, never the rollout's 0
            return Measured(None, f"{check} could not be measured (ours): {section.reason}"), None
        return Measured(0.0, f"{check} diagnostic broken by the code: {section.reason}"), None
    return None, section


def _not_diagnosed(judgement: Judgement, component: Leak | Scaling) -> Measured | None:
    early, _ = _diagnosed(judgement, "leaks" if isinstance(component, Leak) else "complexity")
    return early if early is not None and early.score is None else None


def leak_score(judgement: Judgement, spec: Leak) -> Measured:
    """The :class:`~execgym.reward.spec.Leak` component (from ``judgement.diagnostics``)."""
    early, section = _diagnosed(judgement, "leaks")
    if early is not None:
        return early
    found = section.data.get("found") or []
    if not found:
        return Measured(1.0, f"no leak ({section.reason})")
    first = found[0]
    line = first["where"].get("line")
    return Measured(
        0.0, f"{len(found)} leak(s); first: {first['kind']} at line {line}: {first['what']}"
    )


def scaling_score(judgement: Judgement, spec: Scaling) -> Measured:
    """The :class:`~execgym.reward.spec.Scaling` component (from ``judgement.diagnostics``)."""
    early, section = _diagnosed(judgement, "complexity")
    if early is not None:
        return early
    mine, theirs = section.data["model"], section.data["reference"]
    steps = int(mine["rank"]) - int(theirs["rank"])
    score = 1.0 if steps <= 0 else max(0.0, 1.0 - steps / spec.classes_to_zero)
    return Measured(score, f"model {mine['class']} vs reference {theirs['class']}")


def coverage_score(judgement: Judgement) -> Measured:
    """The :class:`~execgym.reward.spec.Coverage` component (from the coverage run)."""
    line, branch = judgement.details.get("line_coverage"), judgement.details.get("branch_coverage")
    if not isinstance(line, float | int) or not isinstance(branch, float | int):
        return Measured(0.0, f"no coverage measured ({judgement.verdict.value})")
    detail = f"line {line:.0%}, branch {branch:.0%} of the reference"
    if judgement.verdict is not Verdict.PASSED:
        return Measured(0.0, f"the tests fail on the reference; {detail}")
    return Measured((line + branch) / 2, detail)


def penalty_of(task: Task, completion: str, spec: Penalty) -> Measured:
    """The :class:`~execgym.reward.spec.Penalty` component: ``p`` in [0, 1].

    Raises:
        ConfigError: never; a function returning a non-number, or raising, is a bug
            of the spec's author and propagates as is.
    """
    if spec.function is not None:
        value = float(spec.function(completion, task))
        return Measured(min(1.0, max(0.0, value)), f"{spec.function.__name__} = {value:.3f}")
    if spec.max_chars is not None:
        over = (len(completion) - spec.max_chars) / spec.max_chars
        return Measured(
            min(1.0, max(0.0, over)), f"{len(completion)} chars, {spec.max_chars} allowed"
        )
    return Measured(0.0, "no penalty configured")


def _quality(program: str, completion: str, component: Any) -> Measured:
    if isinstance(component, Static):
        start = program.rfind(completion) if completion else -1
        first_line = program[:start].count("\n") + 1 if start >= 0 else 1
        return static_score(program, component, first_line=first_line)
    if isinstance(component, Complexity):
        return complexity_score(program, component)
    return security_score(program, component)


async def evaluate(
    spec: RewardSpec, task: Task, completion: str, judgement: Judgement
) -> RewardBreakdown:
    """The reward of one judged rollout.

    Args:
        spec: The reward specification.
        task: The rollout's task.
        completion: The model's code.
        judgement: What the judge said (run with ``cases`` / ``measure_reference``
            as ``spec.needs_cases`` / ``spec.needs_reference`` ask).

    Returns:
        The breakdown; ``total`` is ``None`` for a masked verdict and 0 for ``tampered``.

    Raises:
        ConfigError: if a component's tool (ruff, radon, bandit) is missing.
    """
    check_tools(spec)
    penalties = frozenset({"penalty"})
    if judgement.verdict.is_masked:
        return RewardBreakdown(None, spec.name, (), f"masked: {judgement.verdict.value}")
    if judgement.verdict is Verdict.TAMPERED:
        hack = judgement.details.get("hack", "tampering")
        zero = tuple(ComponentScore(c.kind, 0.0, c.weight, "tampered") for c in spec.components)
        return RewardBreakdown(0.0, spec.name, zero, f"0 = tampered ({hack})")
    program = build_program(task, completion)
    passed = judgement.verdict is Verdict.PASSED
    gated = spec.gate == "passed" and not passed
    scores: list[ComponentScore] = []
    for component in spec.components:
        if isinstance(component, Correctness):
            measured = correctness_score(judgement, component)
        elif isinstance(component, Penalty):
            measured = penalty_of(task, completion, component)
        elif isinstance(component, Leak | Scaling) and _not_diagnosed(judgement, component):
            # Not measured: left out of the weights, gated or not, so a spec with these
            # components scores rollouts without diagnostics exactly as one without them.
            measured = _not_diagnosed(judgement, component)  # type: ignore[assignment]
        elif gated:
            measured = Measured(0.0, f"gated: the rollout did not pass ({judgement.verdict.value})")
        elif isinstance(component, Efficiency):
            measured = efficiency_score(judgement, component)
        elif isinstance(component, Coverage):
            measured = coverage_score(judgement)
        elif isinstance(component, Leak):
            measured = leak_score(judgement, component)
        elif isinstance(component, Scaling):
            measured = scaling_score(judgement, component)
        else:  # Static, Complexity, Security: the program as text
            try:
                measured = await asyncio.to_thread(_quality, program, completion, component)
            except ConfigError:  # a tool is missing: the operator's to fix, before any run
                raise
            except Exception as error:
                # The tool failed on this code (a RecursionError on a deep expression, a
                # crash, a timeout). The code is the rollout's, so this is never "not
                # applicable" (left out, which would drop a 0 from the average): 0, with
                # the reason (see execgym.judges.masking).
                log.warning("reward component %s failed: %r", component.kind, error)
                measured = Measured(
                    0.0, f"{component.kind}: the code could not be analysed: {error!r}"[:300]
                )
        scores.append(
            ComponentScore(component.kind, measured.score, component.weight, measured.detail)
        )
    return combine(spec.name, scores, penalties=penalties)
