"""The batch runner: many episodes from a JSONL of actions; a bad line never sinks it."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from execgym.cli import main
from execgym.episodes import example_tasks
from execgym.episodes.batch import parse_episode_line, play_episodes, summarize_episodes
from execgym.episodes.task import examples_dir

from .conftest import TASK_IDS, call, example, solution


def test_lines_are_parsed_or_say_what_is_wrong() -> None:
    tasks = example_tasks()
    good = parse_episode_line(json.dumps({"task": TASK_IDS[0], "actions": []}), 1, tasks)
    assert good.task == example(TASK_IDS[0])
    assert not good.problem
    inline = example(TASK_IDS[1]).model_dump()
    assert parse_episode_line(json.dumps({"task": inline}), 2, tasks).task is not None
    problems = {
        "{oops": "not JSON",
        "[1]": "JSON object",
        json.dumps({"task": "nope", "actions": []}): "no repo task 'nope'",
        json.dumps({"task": TASK_IDS[0], "actions": {}}): "'actions' must be a list",
        json.dumps({"task": 3}): "task id or an inline task",
        json.dumps({"task": {"id": "x"}}): "inline task: repo: Field required",
    }
    for text, message in problems.items():
        line = parse_episode_line(text, 7, tasks)
        assert line.task is None
        assert message in line.problem, (text, line.problem)


def _write_actions(path: Path) -> Path:
    broken_setup = {**example(TASK_IDS[0]).model_dump(), "id": "broken", "setup": "exit 9"}
    lines = [
        json.dumps({"task": TASK_IDS[0], "actions": solution(TASK_IDS[0], run_tests=False)}),
        "{not json",
        "",
        json.dumps({"task": "example/unknown", "actions": []}),
        json.dumps({"task": broken_setup, "actions": []}),
        json.dumps({"task": TASK_IDS[1], "actions": [call("submit")]}),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_cli_plays_every_line_and_reports_the_broken_ones(tmp_path: Path) -> None:
    actions = _write_actions(tmp_path / "actions.jsonl")
    output = tmp_path / "results.jsonl"
    result = CliRunner().invoke(
        main,
        ["episodes", "run", str(actions), "-j", "4", "-o", str(output), "--memory", "256MiB"],
    )
    assert result.exit_code == 0, result.output
    records = {r["line"]: r for r in map(json.loads, output.read_text().splitlines())}
    assert sorted(records) == [1, 2, 4, 5, 6]
    assert records[1]["reward"] == 1.0
    assert records[1]["steps"] == len(solution(TASK_IDS[0], run_tests=False)) + 1
    assert records[1]["step_time_p50_s"] > 0
    assert records[6]["reward"] == 0.0
    assert "not JSON" in records[2]["error"]
    assert "example/unknown" in records[4]["error"]
    assert "exit code 9" in records[5]["error"]
    assert all(records[n]["reward"] is None for n in (2, 4, 5))
    assert "episodes: 5" in result.output
    assert "solved: 1" in result.output
    assert "errors: 3" in result.output
    assert "line 2: not JSON" in result.stderr


def test_the_shipped_solutions_file_is_a_valid_batch() -> None:
    text = (examples_dir() / "solutions.jsonl").read_text().splitlines()
    lines = [parse_episode_line(t, n, example_tasks()) for n, t in enumerate(text, 1)]
    assert [line.task.id for line in lines if line.task] == TASK_IDS


async def test_the_library_yields_results_as_they_finish() -> None:
    lines = [parse_episode_line(json.dumps({"task": TASK_IDS[2]}), 1, example_tasks())]
    records = [record async for record in play_episodes(lines, concurrency=1)]
    assert records[0]["reward"] == 0.0
    summary = summarize_episodes(records, wall_time_s=2.0)
    assert summary["episodes"] == 1
    assert summary["solved"] == 0
    assert summary["mean_reward"] == 0.0


def test_usage_errors_exit_non_zero(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(main, ["episodes", "run", str(tmp_path / "none.jsonl")])
    assert missing.exit_code == 1
    assert "cannot read episodes" in missing.stderr
    actions = _write_actions(tmp_path / "a.jsonl")
    same = runner.invoke(main, ["episodes", "run", str(actions), "-o", str(actions)])
    assert same.exit_code == 2
    zero = runner.invoke(main, ["episodes", "run", str(actions), "-j", "0"])
    assert zero.exit_code == 2
    tiny = runner.invoke(main, ["episodes", "run", str(actions), "--memory", "512"])
    assert tiny.exit_code == 2
    assert "16MiB" in tiny.output
