"""``execgym score --reward``: presets and files, breakdowns in the results."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from execgym.cli import main
from execgym.tasks import load_dataset
from tests.conftest import ONE_TASK, write_jsonl

REFERENCES_FULL = bool(os.environ.get("EXECGYM_REFERENCES_FULL"))  # as tests/datasets/


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


@pytest.mark.slow
def test_quality_scores_every_humaneval_task_with_a_breakdown(bwrap_sandbox, tmp_path) -> None:
    """HumanEval's references under ``--reward quality``: every 8th task (21) in the suite,
    all 164 with ``EXECGYM_REFERENCES_FULL=1`` (``--solutions canonical``, which
    tests/test_cli.py's canonical run covers in the suite)."""
    out = tmp_path / "results.jsonl"
    if REFERENCES_FULL:
        rollouts, expected = ["--solutions", "canonical"], 164
    else:
        tasks = list(load_dataset("humaneval").values())[::8]
        lines = [{"task_id": t.task_id, "completion": t.reference} for t in tasks]
        rollouts, expected = [str(write_jsonl(tmp_path / "refs.jsonl", lines))], len(tasks)
    code, output = run(
        "score", "--dataset", "humaneval", *rollouts, "--reward", "quality", "-o", str(out)
    )
    assert code == 0, output
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(results) == expected
    measured = {"correctness", "static", "complexity", "security", "efficiency"}
    diagnosed = {"leak", "scaling"}  # only with diagnostics (--diagnose or the task's field)
    for result in results:
        breakdown = result["reward_breakdown"]
        assert result["verdict"] == "passed"
        assert set(breakdown["components"]) == measured | diagnosed
        assert all(breakdown["components"][k]["score"] is not None for k in measured)
        assert all(breakdown["components"][k]["score"] is None for k in diagnosed)
        assert "diagnostics" not in result
        assert 0.0 < result["reward"] <= 1.0
        assert result["reward"] == breakdown["total"]
        assert breakdown["explanation"].startswith(f"{result['reward']:.3f} = ")


def test_reward_file_and_bad_reward(bwrap_sandbox, tmp_path: Path) -> None:
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [ONE_TASK])
    rollouts = write_jsonl(
        tmp_path / "rollouts.jsonl",
        [{"task_id": "t/1", "completion": "    return 1\n"}, {"task_id": "t/1", "completion": ""}],
    )
    spec = tmp_path / "half.toml"
    spec.write_text('[[component]]\nkind = "correctness"\nmode = "fraction"\n')
    out = tmp_path / "results.jsonl"
    code, output = run("score", str(tasks), str(rollouts), "--reward", str(spec), "-o", str(out))
    assert code == 0, output
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["reward"] for r in sorted(results, key=lambda r: r["index"])] == [1.0, 0.0]
    assert results[0]["reward_breakdown"]["spec"] == "half"
    code, output = run("score", str(tasks), str(rollouts), "--reward", "qualty")
    assert code == 2  # a bad option value is bad usage (docs/scoring.md)
    assert "Invalid value for '--reward'" in output
    assert "unknown reward 'qualty'" in output
