"""LeetCodeDataset v0.3.1, test split: 228 LeetCode problems with about 100 asserts each.

Source: Xia et al. 2025, "LeetCodeDataset: A Temporal Dataset for Robust Evaluation and
Efficient Training of Code LLMs", https://github.com/newfacade/LeetCodeDataset, MIT
(``execgym/data/leetcodedataset/``: SOURCE.md, LICENSE; the problem texts are
LeetCode's: research and evaluation use only).

Each record becomes an ``assert`` task judged as upstream does: ``prompt`` (the import
preamble with ``ListNode``/``TreeNode`` helpers) + the solution (a ``class Solution``) +
``test`` + ``check(<entry_point>)``. Upstream's entry point is an expression,
``Solution().method``; the judge calls that method of the solution's ``Solution`` (the
tests run in their own process: ``ListNode``/``TreeNode`` objects, which the prompt
defines, cross by value). Some prompts import ``sortedcontainers`` (a PyPI package): those get the
host's site-packages on ``sys.path`` first, and are skipped (masked) if it is missing.
"""

from __future__ import annotations

import sys

from execgym.tasks.datasets._files import (
    Loaded,
    data_path,
    imported_modules,
    missing_modules,
    read_records,
    with_python_libraries,
)
from execgym.tasks.models import Task, TaskLimits

SLOW_REFERENCES = {
    "maximum-number-of-moves-to-kill-all-pawns": TaskLimits(wall_time_s=240, cpu_time_s=90),
    "find-the-number-of-subsequences-with-equal-gcd": TaskLimits(wall_time_s=240, cpu_time_s=90),
    "find-the-number-of-k-even-arrays": TaskLimits(wall_time_s=120, cpu_time_s=30),
}
"""Tasks whose references need many CPU seconds for their ~100 asserts (measured
2026-12-02: 17.6 s, 24.2 s and 3.8 s of CPU), given limits of about 4 times that,
with wall time to spare on a loaded machine; every other task keeps the run's limits."""


def _method(expression: str) -> str:
    """``"Solution().twoSum"`` -> ``"twoSum"``: the judge finds ``Solution`` methods."""
    return expression.rsplit(".", 1)[-1].strip()


def load_leetcodedataset() -> Loaded:
    """LeetCodeDataset v0.3.1 test split (228 tasks, ids are problem slugs).

    Raises:
        TaskNotFound: if the data file is missing.
    """
    tasks = {}
    skipped: dict[str, str] = {}
    references: dict[str, str] = {}
    for record in read_records(
        data_path("leetcodedataset", "LeetCodeDataset-v0.3.1-test.jsonl.gz")
    ):
        prompt = record["prompt"]
        third_party = [m for m in imported_modules(prompt) if m not in sys.stdlib_module_names]
        if missing_modules(third_party):
            why = f"its prompt imports {missing_modules(third_party)}: pip install them"
            skipped[record["task_id"]] = why
            references[record["task_id"]] = record["completion"]
            continue
        tasks[record["task_id"]] = Task(
            task_id=record["task_id"],
            # Always: references (and rollouts) may import what the prompt does not.
            prompt=with_python_libraries(prompt),
            tests=record["test"],
            entry_point=_method(record["entry_point"]),
            reference=record["completion"],
            limits=SLOW_REFERENCES.get(record["task_id"]),
        )
    return Loaded(tasks, skipped, references)
