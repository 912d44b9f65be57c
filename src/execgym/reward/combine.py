"""Combine component scores into one reward in [0, 1], with a breakdown and a reason.

The formula (documented once, here): with applicable components ``i`` (score ``s_i``
in [0, 1], weight ``w_i``) and penalties ``j`` (``p_j`` in [0, 1], weight ``v_j`` in
[0, 1])::

    total = (sum_i w_i * s_i / sum_i w_i) * prod_j (1 - v_j * p_j)

so ``0 <= total <= 1``. A component that is not applicable (``None``: efficiency of a
task without a reference) is left out of both sums. A ``tampered`` verdict gives 0; a
masked verdict (``sandbox_error``, ``invalid``) gives ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ComponentScore:
    """One component's part of a reward.

    Attributes:
        kind: The component (``correctness``, ``static``...).
        score: In [0, 1]; for a penalty, the penalty ``p``; ``None`` if not applicable.
        weight: Its weight in the spec.
        detail: What was measured, for humans.
    """

    kind: str
    score: float | None
    weight: float
    detail: str = ""


@dataclass(frozen=True, slots=True)
class RewardBreakdown:
    """A reward: the total, every component, and a one-line explanation.

    Attributes:
        total: In [0, 1]; ``None`` when masked (leave the sample out, never 0).
        spec: The spec's name (``binary``, ``quality``, a file's stem).
        components: Each component's score.
        explanation: How the total came about, for humans.
    """

    total: float | None
    spec: str
    components: tuple[ComponentScore, ...]
    explanation: str

    def to_json(self) -> dict[str, Any]:
        """The ``reward_breakdown`` object of a results line."""
        return {
            "total": self.total,
            "spec": self.spec,
            "components": {
                c.kind: {
                    "score": None if c.score is None else round(c.score, 6),
                    "weight": c.weight,
                    "detail": c.detail,
                }
                for c in self.components
            },
            "explanation": self.explanation,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RewardBreakdown:
        """The breakdown :meth:`to_json` wrote as ``data`` (components in its order).

        Raises:
            KeyError, TypeError: if ``data`` lacks a field or has one of the wrong kind.
        """
        components = tuple(
            ComponentScore(kind, part["score"], part["weight"], part["detail"])
            for kind, part in data["components"].items()
        )
        return cls(data["total"], data["spec"], components, data["explanation"])


def combine(
    spec_name: str, scores: list[ComponentScore], *, penalties: frozenset[str]
) -> RewardBreakdown:
    """The total of ``scores`` by the formula of this module.

    Args:
        spec_name: For the breakdown.
        scores: Component scores in spec order.
        penalties: The kinds in ``scores`` that are penalties.
    """
    parts = [s for s in scores if s.kind not in penalties and s.score is not None]
    weight = sum(s.weight for s in parts)
    mean = sum(s.weight * (s.score or 0.0) for s in parts) / weight if weight > 0 else 0.0
    factor = 1.0
    for s in scores:
        if s.kind in penalties and s.score is not None:
            factor *= 1 - s.weight * s.score
    total = min(1.0, max(0.0, mean * factor))
    terms = " + ".join(f"{s.weight:g}*{s.kind} {s.score:.2f}" for s in parts)
    text = f"{total:.3f} = ({terms}) / {weight:g}"
    if factor != 1.0:
        text += f" * penalty factor {factor:.2f}"
    skipped = [s.kind for s in scores if s.score is None]
    if skipped:
        text += f"; not applicable: {', '.join(skipped)}"
    return RewardBreakdown(total, spec_name, tuple(scores), text)
