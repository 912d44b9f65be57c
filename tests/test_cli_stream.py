"""``execgym score``'s results file: streamed, in input order, one line per rollout for
every line reader; and the batch's memory does not hold the results (issue 23)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from execgym._results_file import json_line
from execgym.cli import main
from execgym.cli.score_inputs import RolloutStream
from tests.conftest import ONE_TASK, write_jsonl


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_results_have_no_raw_line_separators_for_splitlines_readers(
    bwrap_sandbox, tmp_path: Path
) -> None:
    # A rollout controls its output and its exception's message: U+2028, U+2029 and
    # U+0085 are valid raw inside JSON strings, but str.splitlines() splits on them,
    # so a reader that does `for line in text.splitlines()` saw broken lines.
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [ONE_TASK])
    separators = "a\\u2028b\\u2029c\\x85d"
    completion = f"    print('{separators}')\n    raise ValueError('{separators}')\n"
    rollouts = write_jsonl(
        tmp_path / "rollouts.jsonl",
        [{"task_id": "t/1", "completion": completion}, {"task_id": "t/1", "completion": "x"}],
    )
    out = tmp_path / "r.jsonl"
    code, stdout, stderr = run("score", str(tasks), str(rollouts), "-o", str(out))
    assert code == 0, stdout + stderr
    text = out.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert first["verdict"] == "error"
    assert "a\u2028b\u2029c\x85d" in first["stdout_tail"]
    assert "a\u2028b\u2029c\x85d" in first["error"]["message"]
    assert not {"\u2028", "\u2029", "\x85"} & set(text)


def test_json_line_escapes_every_splitlines_break_and_lone_surrogates() -> None:
    breaks = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
    value = {"s": f"x{breaks}y\udc80", "k\u2028": [breaks]}
    data = json_line(value)
    text = data.decode("utf-8")
    assert text.endswith("\n")
    assert len(text.splitlines()) == 1
    assert json.loads(text) == value


def test_results_are_in_input_order_by_default_and_as_finished_on_request(
    bwrap_sandbox, tmp_path: Path
) -> None:
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [ONE_TASK])
    slow = "    import time\n    time.sleep(1.5)\n    return 1\n"
    items = [{"task_id": "t/1", "completion": slow}] + [
        {"task_id": "t/1", "completion": "    return 1\n"} for _ in range(5)
    ]
    rollouts = write_jsonl(tmp_path / "rollouts.jsonl", items)
    indexes = {}
    for order in ("input", "completion"):
        out = tmp_path / f"{order}.jsonl"
        code, stdout, stderr = run(
            "score", str(tasks), str(rollouts), "-o", str(out), "--workers", "2",
            "--order", order,
        )  # fmt: skip
        assert code == 0, stdout + stderr
        results = [json.loads(line) for line in out.read_text().splitlines()]
        assert {r["verdict"] for r in results} == {"passed"}
        indexes[order] = [r["index"] for r in results]
    assert indexes["input"] == list(range(6))
    assert indexes["completion"][0] != 0
    assert sorted(indexes["completion"]) == list(range(6))


def test_repeated_ids_and_unknown_tasks_are_still_warned_about(
    bwrap_sandbox, tmp_path: Path
) -> None:
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [ONE_TASK])
    rollouts = write_jsonl(
        tmp_path / "rollouts.jsonl",
        [
            {"task_id": "t/1", "completion": "    return 1\n", "rollout_id": "same"},
            {"task_id": "t/1", "completion": "    return 1\n", "rollout_id": "same"},
            {"task_id": "t/1", "completion": "    return 1\n", "rollout_id": "t/1#3"},
            {"task_id": "t/1", "completion": "    return 1\n"},  # t/1#3 again, generated
            {"task_id": "nope", "completion": "x"},
        ],
    )
    out = tmp_path / "r.jsonl"
    code, stdout, stderr = run("score", str(tasks), str(rollouts), "-o", str(out))
    assert code == 0, stdout + stderr
    assert "2 rollout_id(s) appear more than once, e.g. 'same', 't/1#3'" in stderr
    assert "1 rollout(s) for task_id 'nope' scored as invalid: no such task" in stderr
    assert "5 rollouts" in stdout


def test_the_rollout_stream_reads_lazily_and_counts_without_parsing(tmp_path: Path) -> None:
    rollouts = tmp_path / "r.jsonl"
    rollouts.write_text('{"task_id": "t/1", "completion": "x"}\n\n  \nnot json\n' * 3)
    stream = RolloutStream(str(rollouts), {}, {})
    assert stream.total == 6
    iterator = iter(stream)
    first = next(iterator)
    assert first.index == 0
    assert [item.index for item in iterator] == [1, 2, 3, 4, 5]


def test_names_kept_beside_their_sources_for_a_fast_start_are_equal() -> None:
    # The command line names these itself, so that it starts without importing them.
    from execgym.cli import options
    from execgym.cli.score_batch import OUTPUT_TAIL
    from execgym.scoring import TAIL_BYTES
    from execgym.tasks.datasets import DATASETS

    assert tuple(DATASETS) == options.DATASETS
    assert OUTPUT_TAIL == TAIL_BYTES
    from execgym.broker import EMBEDDED

    assert options.EMBEDDED == EMBEDDED


def test_the_command_line_imports_no_judge_data_set_or_broker_to_start() -> None:
    import subprocess
    import sys

    code = (
        "import sys, execgym.cli.score\n"
        "heavy = ('execgym.scoring', 'execgym.tasks.models', 'execgym.broker',"
        " 'execgym.ops.metrics', 'pydantic', 'execgym.storage', 'execgym.episodes',"
        " 'execgym.judges')\n"
        "print([m for m in heavy if m in sys.modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_help_lists_every_command_without_loading_the_scoring_stack() -> None:
    # Found by QA (2026-12-02): `execgym --help` imports every command's module to list
    # them, and `execgym status` imported the broker (and with it scoring, every judge,
    # the task models and metrics) at module level: --help took 3x the time of
    # `execgym score --help`.
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from execgym.cli import main\n"
        "assert CliRunner().invoke(main, ['--help']).exit_code == 0\n"
        "heavy = ('execgym.scoring', 'execgym.tasks.models', 'execgym.broker',"
        " 'execgym.ops.metrics', 'execgym.episodes', 'execgym.judges')\n"
        "print([m for m in heavy if m in sys.modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_dash_output_writes_the_results_to_stdout_and_the_summary_to_stderr(
    bwrap_sandbox, tmp_path: Path
) -> None:
    # Found by QA (2026-12-02): `-o -` wrote a file named "-" (and `-o /dev/stdout`
    # mixed the summary into the JSONL), so `execgym score ... -o - | jq` read the summary.
    import subprocess
    import sys

    tasks = write_jsonl(tmp_path / "tasks.jsonl", [ONE_TASK])
    rollouts = write_jsonl(
        tmp_path / "r.jsonl",
        [{"task_id": "t/1", "completion": "    return 1\n"}, {"task_id": "nope", "completion": ""}],
    )
    command = [sys.executable, "-m", "execgym", "score", str(tasks), str(rollouts), "-o", "-"]
    done = subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]  # nothing else on stdout
    assert [(r["index"], r["verdict"]) for r in records] == [(0, "passed"), (1, "invalid")]
    assert "pass@1" in done.stderr
    assert "results: stdout" in done.stderr
    assert not (tmp_path / "-").exists()
    refused = CliRunner().invoke(
        main, ["score", str(tasks), str(rollouts), "-o", "-", "--store", str(tmp_path / "s")]
    )
    assert refused.exit_code == 2
    assert "-o PATH" in refused.output


def test_score_opens_one_event_loop_for_loading_self_test_and_batch(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Issue 19: loading, the self-test, the batch and its results file share one loop
    # (execgym.cli.score_batch.run_batch); a second asyncio.run would start its own.
    import asyncio.events

    loops: list[object] = []
    new_event_loop = asyncio.events.new_event_loop

    def counted() -> asyncio.AbstractEventLoop:
        loop = new_event_loop()
        loops.append(loop)
        return loop

    monkeypatch.setattr(asyncio.events, "new_event_loop", counted)
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [{**ONE_TASK, "reference": "    return 1\n"}])
    out = tmp_path / "out.jsonl"
    args = ["score", str(tasks), "--solutions", "canonical", "--isolation", "none"]
    code, stdout, stderr = run(*args, "--allow-root", "-o", str(out))
    assert code == 0, stdout + stderr
    assert json.loads(out.read_text())["verdict"] == "passed"
    assert len(loops) == 1
