"""Shaped rewards against the two padding hacks of issue 18, measured in one run.

``quality``: the same sloppy solution of an ``add`` task, plain and padded with 400
comment lines, 400 docstrings or 400 blank lines; prints the total and the ``static``
and ``complexity`` components (before the fix, 400 comment lines took static from 0 to
0.91 and the total up by about 0.08).

``efficiency``: the same work (allocate 200 MiB, burn 0.4 s of CPU) done inline, in a
child the solution never reaps (it reads the answer from a pipe), and in an orphaned
grandchild; prints the efficiency score, the CPU and peak memory it was charged with,
and the run's own figures (its cgroup's, where there is one), on fresh bwrap and the
warm pool (before the fix, the unreaped child scored 0.75-0.96 against 0.04 inline).
Figures measured while others load the machine are noisy.

    .venv/bin/python benchmarks/reward_hacks.py
"""

from __future__ import annotations

import asyncio

from execgym import Limits, Rollout, RolloutLine, Scorer, Task, Verdict
from execgym.judges.base import Judgement
from execgym.limits import MiB
from execgym.reward import PRESETS, Correctness, Efficiency, RewardSpec, evaluate
from execgym.sandbox import BubblewrapSandbox, WarmPoolSandbox

TASK = Task(
    task_id="bench/add",
    prompt="def add(a, b):\n",
    tests="def check(candidate):\n    assert candidate(2, 3) == 5\n",
    entry_point="add",
    reference="    return a + b\n",
)
SLOPPY = (
    "    import os, sys\n    l = []\n    if a == None or b == None:\n"
    "        return None\n    return a + b\n"
)
PADDING = {
    "plain": "",
    "400 comment lines": "".join(f"    # note {i}: adds the numbers\n" for i in range(400)),
    "400 docstrings": "".join(f"    '''note {i}: adds the numbers'''\n" for i in range(400)),
    "400 blank lines": "\n" * 400,
}
WORK = (
    "import time\nblob = bytearray(200 * 2**20)\nend = time.process_time() + 0.4\n"
    "while time.process_time() < end:\n    pass\n"
)


def indent(code: str, depth: int) -> str:
    return "".join(" " * depth + line + "\n" for line in code.splitlines())


EFFICIENCY = {
    "inline": indent(WORK, 4) + "    return a + b\n",
    "unreaped child": "    import os\n    r, w = os.pipe()\n    if os.fork() == 0:\n"
    + indent(WORK, 8)
    + "        os.write(w, b'5')\n        os._exit(0)\n    return int(os.read(r, 1))\n",
    "orphaned grandchild": "    import os\n    r, w = os.pipe()\n    if os.fork() == 0:\n"
    "        if os.fork() != 0:\n            os._exit(0)\n"
    + indent(WORK, 8)
    + "        os.write(w, b'5')\n        os._exit(0)\n    return int(os.read(r, 1))\n",
}


async def quality() -> None:
    print("quality preset, the same sloppy add():")
    measured = {
        "cpu_s": 0.01,
        "maxrss_kb": 10_000,
        "reference_cpu_s": 0.01,
        "reference_maxrss_kb": 10_000,
        "reference_verdict": "passed",
    }
    for name, padding in PADDING.items():
        result = await evaluate(
            PRESETS["quality"], TASK, padding + SLOPPY, Judgement(Verdict.PASSED, details=measured)
        )
        parts = {c.kind: c for c in result.components}
        print(
            f"  {name:20s} total {result.total:.3f}  static {parts['static'].score:.2f} "
            f"({parts['static'].detail})  complexity {parts['complexity'].score:.2f}"
        )


async def efficiency() -> None:
    spec = RewardSpec(name="efficiency", components=(Correctness(), Efficiency()))
    limits = Limits(wall_time_s=20, cpu_time_s=20, memory_bytes=1024 * MiB)
    async with WarmPoolSandbox() as pool:
        for sandbox in (BubblewrapSandbox(), pool):
            print(f"efficiency on {type(sandbox).__name__}:")
            scorer = Scorer({TASK.task_id: TASK}, sandbox, limits, reward=spec)
            for name, completion in EFFICIENCY.items():
                rollout = Rollout(task_id=TASK.task_id, completion=completion)
                result = await scorer.score_one(RolloutLine(0, rollout))
                assert result.reward_breakdown is not None
                assert result.judgement is not None
                component = result.reward_breakdown.components[1]
                run = result.judgement.run
                run_figures = (
                    f"run: CPU {run.cpu_time_s:.3f} s, peak {run.peak_memory_bytes or 0:,} B"
                    if run is not None
                    else "run: none"
                )
                print(
                    f"  {name:20s} {result.verdict.value:7s} score {component.score:.3f}  "
                    f"{component.detail}  | {run_figures}"
                )


async def main() -> None:
    await quality()
    await efficiency()


if __name__ == "__main__":
    asyncio.run(main())
