"""A realistic, shareable RL batch: HumanEval completions as a model's rollouts look.

Real batches are not canonical: most rollouts fail, a few loop, sleep, recurse without
end, allocate gigabytes or print megabytes, and those few decide the wall time and the
memory (issue 23). This script makes such a batch from HumanEval alone, with no model:

- wrong answers and exceptions: mutants of each task's reference solution from
  ``execgym validate``'s mutation engine (:func:`execgym.validation.mutants.make_mutants`:
  flipped comparisons, off-by-one constants, dropped statements, swapped builtins...;
  some of them loop forever or raise, as real bugs do);
- correct answers: the reference itself;
- the rare pathological rollouts, injected in small fixed proportions (per mille of
  the batch, see ``PATHOLOGIES``): an infinite loop, a long sleep, unbounded recursion,
  a memory bomb, megabytes of output, a raise.

A mutant is the whole program (prompt and mutated reference, re-printed from its
AST), so its completion is ``pass`` (ending the prompt's function) followed by that
program, which redefines the entry point: ``prompt + completion + tests`` runs it.

    .venv/bin/python benchmarks/mutant_workload.py -o rollouts.jsonl [--per-task 20]
        [--seed 0]
    .venv/bin/execgym score --dataset humaneval rollouts.jsonl --timeout 3

Each rollout's ``rollout_id`` says what it is (``HumanEval/0#mutant-m3``,
``#reference``, ``#loop``...), so results can be grouped by kind.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from execgym import load_dataset
from execgym.tasks.models import Task
from execgym.validation.mutants import make_mutants

PATHOLOGIES = {
    # kind: (per mille of the batch, body of the completion)
    "loop": (3, "    while True:\n        pass\n"),
    "sleep": (1, "    import time\n    time.sleep(60)\n"),
    "recursion": (2, "    def r(n):\n        return r(n + 1) + 1\n    return r(0)\n"),
    "memory": (2, "    data = [bytearray(1 << 20) for _ in range(4096)]\n    return len(data)\n"),
    "output": (2, "    import sys\n    sys.stdout.write('x' * (3 << 20))\n"),
    "raise": (10, "    raise ValueError('not implemented')\n"),
}
"""Rare rollouts in per mille of the batch, in the order of their kind's share in the
sampled batch issue 23 measured (0.3 % ran into the time limit)."""

REFERENCE_SHARE = 0.35
"""Share of the ordinary rollouts that are the correct reference."""


def task_rollouts(task: Task, count: int, rng: random.Random) -> list[dict[str, str]]:
    """``count`` ordinary rollouts of ``task``: references and mutants of it."""
    rollouts: list[dict[str, str]] = []
    # The prompt and the reference only (not the tests): the mutant is a solution.
    source = task.prompt + (task.reference or "")
    first = task.prompt.count("\n") + 1
    mutants, _ = make_mutants(source, lambda line: line >= first, cap=count)
    for index in range(count):
        if not mutants or rng.random() < REFERENCE_SHARE:
            completion, kind = task.reference or "", "reference"
        else:
            mutant = rng.choice(mutants)
            completion = "    pass\n\n" + mutant.source
            kind = f"mutant-{mutant.mutant_id}"
        rollout_id = f"{task.task_id}#{kind}#{index}"
        rollouts.append(
            {"task_id": task.task_id, "completion": completion, "rollout_id": rollout_id}
        )
    return rollouts


def make_workload(per_task: int = 20, seed: int = 0) -> list[dict[str, str]]:
    """The batch: ``per_task`` rollouts of each HumanEval task, pathologies mixed in.

    Deterministic for a given ``seed``. Rollouts of a task stay together (as a trainer
    sends a group's samples) and the pathological ones replace ordinary ones at random
    places, so pass@k is computed over the same ``per_task`` rollouts per task.
    """
    rng = random.Random(seed)
    tasks = load_dataset("humaneval")
    rollouts: list[dict[str, str]] = []
    for task in tasks.values():
        rollouts.extend(task_rollouts(task, per_task, rng))
    places = list(range(len(rollouts)))
    rng.shuffle(places)
    for kind, (per_mille, body) in PATHOLOGIES.items():
        for _ in range(max(1, round(len(rollouts) * per_mille / 1000))):
            place = places.pop()
            task_id = rollouts[place]["task_id"]
            rollouts[place] = {
                "task_id": task_id,
                "completion": body,
                "rollout_id": f"{task_id}#{kind}#{place}",
            }
    return rollouts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", default="rollouts.jsonl")
    parser.add_argument("--per-task", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rollouts = make_workload(args.per_task, args.seed)
    with Path(args.output).open("w") as sink:
        for rollout in rollouts:
            sink.write(json.dumps(rollout) + "\n")
    kinds: dict[str, int] = {}
    for rollout in rollouts:
        kind = rollout["rollout_id"].split("#")[1].split("-")[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    print(f"{len(rollouts)} rollouts to {args.output}: {kinds}")


if __name__ == "__main__":
    main()
