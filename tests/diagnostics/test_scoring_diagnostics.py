"""Diagnostics through every path a result takes: the scorer, the CLI, the trainer client."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from execgym.cli import main
from execgym.integrations.client import RewardClient
from execgym.limits import Limits
from execgym.reward import load_spec
from execgym.sandbox import BubblewrapSandbox
from execgym.scoring import Scorer
from execgym.tasks.models import Rollout, Task

TASK = {
    "task_id": "leaky",
    "prompt": "_seen = []\n\n\ndef f(x):\n",
    "entry_point": "f",
    "tests": "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(2) == 3\n",
    "diagnose": {"checks": ["leaks"]},
}
LEAKY = "    _seen.append([x] * 10)\n    return x + 1\n"
CLEAN = "    return x + 1\n"


async def test_the_scorer_puts_diagnostics_in_each_result(diag_sandbox: BubblewrapSandbox) -> None:
    task = Task.model_validate(TASK)
    scorer = Scorer({"leaky": task}, diag_sandbox, reward=None)
    rollouts = [Rollout(task_id="leaky", completion=c) for c in (LEAKY, CLEAN, "    return 0\n")]
    leaky, clean, wrong = await scorer.score(rollouts)
    found = leaky.to_json()["diagnostics"]["leaks"]["found"]
    assert [leak["kind"] for leak in found] == ["memory"]
    assert found[0]["where"]["line"] == 5  # prompt (4 lines) + the append
    assert found[0]["where"]["code"] == "_seen.append([x] * 10)"
    assert clean.to_json()["diagnostics"]["leaks"]["found"] == []
    assert wrong.to_json()["diagnostics"]["leaks"]["status"] == "not_applicable"  # failed


async def test_without_the_field_or_the_flag_there_are_none(
    diag_sandbox: BubblewrapSandbox,
) -> None:
    task = Task.model_validate({**TASK, "diagnose": None})
    (result,) = await Scorer({"leaky": task}, diag_sandbox).score(
        [Rollout(task_id="leaky", completion=LEAKY)]
    )
    assert "diagnostics" not in result.to_json()
    diagnosed = Scorer({"leaky": task}, diag_sandbox, diagnose=("leaks",))
    (result,) = await diagnosed.score([Rollout(task_id="leaky", completion=LEAKY)])
    assert result.to_json()["diagnostics"]["leaks"]["found"]


async def test_the_trainer_client_carries_them(diag_sandbox: BubblewrapSandbox) -> None:
    async with RewardClient(sandbox=diag_sandbox, reward="quality") as client:
        score = await client.score_task(Task.model_validate(TASK), LEAKY)
    assert score.diagnostics is not None
    assert score.diagnostics["leaks"]["found"][0]["kind"] == "memory"
    assert score.breakdown is not None
    assert score.breakdown["components"]["leak"]["score"] == 0.0


def test_the_command_line(diag_sandbox: BubblewrapSandbox, tmp_path: Path) -> None:
    tasks, rollouts, out = tmp_path / "t.jsonl", tmp_path / "r.jsonl", tmp_path / "o.jsonl"
    tasks.write_text(json.dumps({**TASK, "diagnose": None}) + "\n")
    rollouts.write_text(json.dumps({"task_id": "leaky", "completion": LEAKY}) + "\n")
    args = ["score", str(tasks), str(rollouts), "-o", str(out), "--reward", "quality"]
    result = CliRunner().invoke(main, [*args, "--diagnose", "leaks,hotspots"])
    assert result.exit_code == 0, result.output
    line = json.loads(out.read_text())
    assert line["diagnostics"]["leaks"]["found"][0]["kind"] == "memory"
    assert line["diagnostics"]["hotspots"]["status"] == "measured"
    assert line["reward_breakdown"]["components"]["leak"]["score"] == 0.0
    bad = CliRunner().invoke(main, [*args, "--diagnose", "leaks,speed"])
    assert bad.exit_code == 2  # a bad option value is bad usage (docs/scoring.md)
    assert "Invalid value for '--diagnose'" in bad.output
    assert "unknown check(s) speed" in bad.output
    assert "leaks, hotspots, complexity" in bad.output


HOSTILE = {
    # passes the judge (each case in a fresh fork), then hangs on the diagnostics' calls
    "hangs": "    global _calls\n    _calls = globals().get('_calls', 0) + 1\n"
    "    while _calls > 3:\n        pass\n    return x + 1\n",
    # kills the harness that reads it from outside
    "kills the harness": "    import os, signal\n    if globals().setdefault('_n', [0])[0] > 2:\n"
    "        os.kill(os.getppid(), signal.SIGKILL)\n    _n[0] += 1\n    return x + 1\n",
    # exits from inside the entry point after a few calls
    "exits": "    import os\n    _n = globals().setdefault('_n', [0])\n    _n[0] += 1\n"
    "    if _n[0] > 3:\n        os._exit(0)\n    return x + 1\n",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
async def test_code_that_breaks_the_diagnostics_scores_zero_never_null(
    name: str, diag_sandbox: BubblewrapSandbox
) -> None:
    """execgym.judges.masking: a failure the rollout causes is the rollout's: 0, not None."""
    task = Task.model_validate(TASK)
    scorer = Scorer(
        {"leaky": task}, diag_sandbox, Limits(wall_time_s=3.0), reward=load_spec("quality")
    )
    (result,) = await scorer.score([Rollout(task_id="leaky", completion=HOSTILE[name])])
    assert result.verdict.value == "passed", result.message
    leaks = result.to_json()["diagnostics"]["leaks"]
    assert (leaks["status"], leaks["fault"]) == ("failed", "rollout"), leaks
    assert result.reward_breakdown is not None
    assert result.reward_breakdown.to_json()["components"]["leak"]["score"] == 0.0
    assert result.reward is not None
