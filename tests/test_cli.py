"""The command line end to end, on real sandboxes and the real HumanEval data."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from execgym.cli import main
from execgym.tasks import load_dataset
from tests.conftest import (
    ONE_TASK,
    default_signals,
    processes_with,
    require,
    run_cgroups,
    write_jsonl,
)


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def humaneval_tasks(tmp_path: Path) -> Path:
    path = tmp_path / "tasks.jsonl"
    with path.open("w") as sink:
        for task in load_dataset("humaneval").values():
            sink.write(task.model_dump_json() + "\n")
    return path


@pytest.mark.slow
def test_canonical_humaneval_all_pass(bwrap_sandbox, tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    code, stdout, _ = run(
        "score", "--dataset", "humaneval", "--solutions", "canonical", "-o", str(out)
    )
    assert code == 0, stdout
    results = read(out)
    assert len(results) == 164
    assert {r["verdict"] for r in results} == {"passed"}
    assert sorted(r["index"] for r in results) == list(range(164))
    assert all(r["isolation"] == "bwrap" and r["reward"] == 1.0 for r in results)
    assert "pass@1: 1.0000" in stdout
    assert "rollouts/s" in stdout


@pytest.mark.slow
def test_return_none_scores_zero(bwrap_sandbox, humaneval_tasks: Path, tmp_path: Path) -> None:
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text(
        "".join(
            json.dumps({"task_id": f"HumanEval/{i}", "completion": "    return None\n"}) + "\n"
            for i in range(164)
        )
    )
    out = tmp_path / "results.jsonl"
    code, stdout, _ = run("score", str(humaneval_tasks), str(rollouts), "-o", str(out))
    assert code == 0, stdout
    results = read(out)
    assert len(results) == 164
    assert not [r for r in results if r["verdict"] == "passed"]
    assert {r["reward"] for r in results} == {0.0}
    assert "pass@1: 0.0000" in stdout


def test_bad_lines_are_reported_and_the_rest_is_scored(bwrap_sandbox, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        json.dumps(
            {
                "task_id": "t/1",
                "prompt": "def f(x):\n",
                "entry_point": "f",
                "tests": "def check(c):\n    assert c(2) == 4\n",
            }
        )
        + "\n"
    )
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text(
        "\n".join(
            [
                json.dumps(
                    {"task_id": "t/1", "completion": "    return x * 2\n", "rollout_id": "a"}
                ),
                "{broken",
                json.dumps({"task_id": "t/9", "completion": "    return 4\n"}),
                json.dumps({"task_id": "t/1", "completion": "    return x + 1\n"}),
                json.dumps({"task_id": "t/1", "completion": "    while True: pass\n"}),
            ]
        )
        + "\n"
    )
    out = tmp_path / "results.jsonl"
    code, stdout, stderr = run(
        "score",
        str(tasks),
        str(rollouts),
        "-o",
        str(out),
        "--timeout",
        "1",
        "--memory",
        "128MiB",
        "--workers",
        "3",
        "--k",
        "1,2",
    )
    assert code == 0, stdout
    assert "rollouts.jsonl:2: not valid JSON" in stderr
    by_index = {r["index"]: r for r in read(out)}
    assert by_index[0]["verdict"] == "passed"
    assert by_index[0]["rollout_id"] == "a"
    assert by_index[1]["verdict"] == "invalid"
    assert by_index[1]["reward"] is None
    assert by_index[2]["verdict"] == "invalid"
    assert "unknown task_id 't/9'" in by_index[2]["message"]
    assert by_index[3]["verdict"] == "failed"
    assert by_index[3]["reward"] == 0.0
    assert by_index[4]["verdict"] == "timeout"
    assert by_index[4]["wall_time_s"] < 2
    assert by_index[3]["rollout_id"] == "t/1#3"
    assert "2 masked" in stdout
    assert "pass@1: 0.3333" in stdout
    assert "pass@2: 0.6667" in stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "nothing to score"),
        (("--dataset", "humaneval"), "ROLLOUTS"),
        (("--dataset", "humaneval", "--solutions", "canonical", "--memory", "lots"), "size"),
        (("--dataset", "humaneval", "--solutions", "canonical", "--k", "0"), "positive"),
    ],
)
def test_usage_errors_say_what_to_do(args: tuple[str, ...], message: str) -> None:
    code, stdout, stderr = run("score", *args)
    assert code in (1, 2)
    assert message in stdout + stderr


def test_missing_bwrap_fails_with_install_hint(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr("shutil.which", lambda name: None)
    code, _, stderr = run(
        "score",
        "--dataset",
        "humaneval",
        "--solutions",
        "canonical",
        "-o",
        str(tmp_path / "r.jsonl"),
    )
    assert code == 1
    assert "apt-get install bubblewrap" in stderr
    assert not (tmp_path / "r.jsonl").exists()


def test_isolation_none_marks_every_result(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        json.dumps(
            {
                "task_id": "t/1",
                "prompt": "def f():\n",
                "entry_point": "f",
                "tests": "def check(c):\n    assert c() == 1\n",
                "reference": "    return 1\n",
            }
        )
        + "\n"
    )
    out = tmp_path / "r.jsonl"
    code, stdout, stderr = run(
        "score",
        str(tasks),
        "--solutions",
        "canonical",
        "--isolation",
        "none",
        "--allow-root",
        "-o",
        str(out),
    )
    assert code == 0, stdout + stderr
    assert read(out)[0]["isolation"] == "none"
    assert read(out)[0]["verdict"] == "passed"
    assert "isolation: none" in stdout


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_interrupted_run_keeps_finished_results_and_leaves_nothing(
    bwrap_sandbox, tmp_path: Path, signum: int
) -> None:
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [ONE_TASK])
    marker = f"execgym-interrupt-{uuid.uuid4().hex}"
    completion = (
        f"    import time, subprocess\n    subprocess.Popen(['{marker}', '60'], "
        "executable='/usr/bin/sleep')\n    time.sleep(0.3)\n    return 1\n"
    )
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text(
        "".join(json.dumps({"task_id": "t/1", "completion": completion}) + "\n" for _ in range(40))
    )
    out = tmp_path / "results.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "execgym",
            "score",
            str(tasks),
            str(rollouts),
            "-o",
            str(out),
            "--workers",
            "2",
        ],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (not out.exists() or out.read_text().count("\n") < 3):
        time.sleep(0.05)
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signum, stderr
    assert "interrupted:" in stderr
    lines = out.read_text().splitlines()
    assert 3 <= len(lines) < 40
    assert all(json.loads(line)["verdict"] == "passed" for line in lines)
    assert out.read_text().endswith("\n")
    time.sleep(0.2)
    assert processes_with(marker) == []


def test_a_sandbox_that_cannot_start_the_harness_stops_before_scoring(
    bwrap_sandbox, monkeypatch, tmp_path: Path
) -> None:
    monkeypatch.setattr("execgym.sandbox.bwrap.interpreter_paths", lambda: ["/nonexistent-path"])
    out = tmp_path / "r.jsonl"
    code, _, stderr = run(
        "score", "--dataset", "humaneval", "--solutions", "canonical", "-o", str(out)
    )
    assert code == 1
    assert "self-test" in stderr
    assert "/nonexistent-path" in stderr
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--timeout", "nan"), "positive, finite"),
        (("--timeout", "inf"), "positive, finite"),
        (("--timeout", "0"), "--timeout"),
        (("--cpu-time", "0"), "--cpu-time"),
        (("--memory", "512"), "did you mean 512MiB?"),
        (("--memory", "1"), "too little"),
        (("-o", "/nonexistent-dir/out.jsonl"), "cannot write the results to /nonexistent-dir"),
        (("--isolation", "none"), "--allow-root"),
    ],
)
def test_bad_options_are_refused_before_anything_runs(
    bwrap_sandbox, args: tuple[str, ...], message: str
) -> None:
    if args == ("--isolation", "none") and os.geteuid() != 0:
        pytest.skip("the root guard only applies to root")
    code, stdout, stderr = run("score", "--dataset", "humaneval", "--solutions", "canonical", *args)
    assert code in (1, 2), stdout
    assert message in stderr


def test_a_tasks_file_without_valid_tasks_is_an_error(tmp_path: Path) -> None:
    rollouts = write_jsonl(tmp_path / "rollouts.jsonl", [{"task_id": "t/1", "completion": "x"}])
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    unsupported = write_jsonl(tmp_path / "ocaml.jsonl", [{**ONE_TASK, "language": "ocaml"}])
    for tasks, swapped in ((empty, False), (rollouts, True), (unsupported, False)):
        code, _, stderr = run("score", str(tasks), str(rollouts), "-o", str(tmp_path / "r"))
        assert code == 1
        assert "no valid tasks in" in stderr
        # Asked only when the tasks file holds rollouts (QA, 2026-12-02: it was asked of
        # every bad tasks file, an unsupported language too).
        assert ("did you swap TASKS and ROLLOUTS?" in stderr) == swapped, stderr


def test_rollouts_of_skipped_or_unknown_tasks_say_why(bwrap_sandbox, tmp_path: Path) -> None:
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [ONE_TASK, {"task_id": "t/2", "prompt": "x"}])
    rollouts = write_jsonl(
        tmp_path / "rollouts.jsonl",
        [
            {"task_id": "t/2", "completion": "x"},
            {"task_id": "t/3", "completion": "x"},
            {"task_id": "t/3", "completion": "y"},
        ],
    )
    out = tmp_path / "r.jsonl"
    code, _, stderr = run("score", str(tasks), str(rollouts), "-o", str(out))
    assert code == 0
    assert "2 rollout(s) for task_id 't/3' scored as invalid: no such task" in stderr
    assert "1 task(s) skipped as invalid (t/2; 1 rollout(s) masked): " in stderr
    assert "tests" in stderr.split("1 task(s) skipped as invalid", 1)[1].splitlines()[0]
    by_index = {r["index"]: r for r in read(out)}
    assert "was skipped because it is invalid" in by_index[0]["message"]
    assert "tasks.jsonl:2" in by_index[0]["message"]


def test_non_ascii_entry_point_and_byte_order_mark(bwrap_sandbox, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    task = {
        "task_id": "t/é",
        "prompt": "def fé():\n",
        "entry_point": "fé",
        "tests": "def check(c):\n    assert c() == 'ü'\n",
        "reference": "    return 'ü'\n",
    }
    tasks.write_bytes(b"\xef\xbb\xbf" + json.dumps(task).encode() + b"\n")
    out = tmp_path / "r.jsonl"
    code, stdout, stderr = run("score", str(tasks), "--solutions", "canonical", "-o", str(out))
    assert code == 0, stdout + stderr
    assert read(out)[0]["verdict"] == "passed"


def test_results_say_how_limits_were_enforced(bwrap_sandbox, tmp_path: Path) -> None:
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [{**ONE_TASK, "reference": "    return 1\n"}])
    out = tmp_path / "r.jsonl"
    code, _, _ = run("score", str(tasks), "--solutions", "canonical", "-o", str(out))
    assert code == 0
    enforcement = read(out)[0]["enforcement"]
    assert enforcement["memory_bytes"]
    assert enforcement["wall_time_s"]


def test_every_signal_stops_a_fast_batch(bwrap_sandbox, tmp_path: Path) -> None:
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [ONE_TASK])
    rollouts = write_jsonl(
        tmp_path / "rollouts.jsonl", [{"task_id": "t/1", "completion": "    return 1\n"}] * 2000
    )
    for trial, signum in enumerate([signal.SIGINT, signal.SIGTERM] * 3):
        out = tmp_path / f"r{trial}.jsonl"
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "execgym",
                "score",
                str(tasks),
                str(rollouts),
                "-o",
                str(out),
                "--workers",
                "2",
            ],
            stderr=subprocess.DEVNULL,
            preexec_fn=default_signals,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (
            not out.exists() or out.read_text().count("\n") < 5 + trial * 3
        ):
            time.sleep(0.01)
        proc.send_signal(signum)
        try:
            assert proc.wait(timeout=10) == 128 + signum, f"trial {trial}"
        finally:
            proc.kill()
            proc.wait()
        assert run_cgroups(proc.pid) == []


def test_dataset_with_one_file_scores_it_as_rollouts_and_warns_of_repeated_ids(
    bwrap_sandbox, tmp_path: Path
) -> None:
    reference = load_dataset("humaneval")["HumanEval/0"].reference
    rollouts = write_jsonl(
        tmp_path / "mine.jsonl",
        [
            {"task_id": "HumanEval/0", "completion": reference, "rollout_id": "same"},
            {"task_id": "HumanEval/0", "completion": "    return None\n", "rollout_id": "same"},
        ],
    )
    out = tmp_path / "r.jsonl"
    code, stdout, stderr = run("score", "--dataset", "humaneval", str(rollouts), "-o", str(out))
    assert code == 0, stdout + stderr
    assert "1 rollout_id(s) appear more than once, e.g. 'same'" in stderr
    results = read(out)
    assert sorted((r["index"], r["rollout_id"], r["verdict"]) for r in results) == [
        (0, "same", "passed"),
        (1, "same", "failed"),
    ]
    assert "2 rollouts, 1 task scored" in stdout
    code, _, stderr = run(
        "score", "--dataset", "humaneval", str(rollouts), str(rollouts), "-o", str(out)
    )
    assert code == 2
    assert "either --dataset or a TASKS file" in stderr


@pytest.mark.parametrize("which", ["tasks", "rollouts", "rollouts-by-another-name"])
def test_output_that_is_an_input_file_is_refused(tmp_path: Path, which: str) -> None:
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [ONE_TASK])
    rollouts = write_jsonl(tmp_path / "r.jsonl", [{"task_id": "t/1", "completion": "x"}])
    before = (tasks.read_text(), rollouts.read_text())
    output = {
        "tasks": str(tasks),
        "rollouts": str(rollouts),
        "rollouts-by-another-name": str(tmp_path / "sub" / ".." / "r.jsonl"),
    }[which]
    (tmp_path / "sub").mkdir()
    code, _, stderr = run("score", str(tasks), str(rollouts), "-o", output)
    assert code == 2
    assert "is the input file" in stderr
    assert (tasks.read_text(), rollouts.read_text()) == before


@pytest.mark.parametrize(
    ("args", "message", "absent"),
    [
        (("--timeout", "1e19"), "'--timeout': 1e+19: give at most 86400 seconds", None),
        (("--cpu-time", "1e300"), "'--cpu-time'", None),
        (("--memory", "100KiB"), "too little to start a program", "MiB?"),
        (("--memory", "100"), "did you mean 100MiB?", None),
        (("--memory", "8388608TiB"), "more than the most allowed, 2**62 bytes", None),
        (("--k", "0"), "'--k'", None),
        (("--k", "1,,2"), "'--k': '1,,2'", None),
        (("-o", "/proc/version"), "cannot write the results to /proc/version", "Traceback"),
    ],
)
def test_bad_values_name_their_option(
    args: tuple[str, ...], message: str, absent: str | None
) -> None:
    code, stdout, stderr = run("score", "--dataset", "humaneval", "--solutions", "canonical", *args)
    assert code == (1 if args[0] == "-o" else 2), stdout + stderr
    assert message in stderr
    if absent is not None:
        assert absent not in stderr


def test_an_empty_tasks_file_does_not_mention_skipped_lines(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    rollouts = write_jsonl(tmp_path / "r.jsonl", [{"task_id": "t/1", "completion": "x"}])
    code, _, stderr = run("score", str(empty), str(rollouts), "-o", str(tmp_path / "o"))
    assert code == 1
    assert "the file has no task lines" in stderr
    assert "line(s) skipped" not in stderr


def test_a_failed_write_is_a_clear_error(bwrap_sandbox, tmp_path: Path) -> None:
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [{**ONE_TASK, "reference": "    return 1\n"}])
    code, _, stderr = run("score", str(tasks), "--solutions", "canonical", "-o", "/dev/full")
    assert code == 1
    assert "cannot write the results to /dev/full: No space left on device" in stderr
    assert "choose another path with -o" in stderr
    assert "Traceback" not in stderr


def test_a_full_disk_keeps_the_complete_lines(bwrap_sandbox, tmp_path: Path) -> None:
    require(os.geteuid() == 0, "root (to mount a small tmpfs)")
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [ONE_TASK])
    rollouts = write_jsonl(
        tmp_path / "r.jsonl", [{"task_id": "t/1", "completion": "    return 1\n"}] * 40
    )
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(disk)], check=True)
    try:
        out = disk / "r.jsonl"
        code, _, stderr = run("score", str(tasks), str(rollouts), "-o", str(out))
        text = out.read_text()
    finally:
        subprocess.run(["umount", str(disk)], check=True)
    assert code == 1
    assert f"cannot write the results to {out}: No space left on device" in stderr
    lines = text.splitlines()
    assert 0 < len(lines) < 40
    assert text.endswith("\n")
    assert all(json.loads(line)["verdict"] == "passed" for line in lines)
    assert f"the first {len(lines)} of 40 results were written" in stderr


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_while_loading_exits_quietly(tmp_path: Path, signum: int) -> None:
    rollouts = tmp_path / "big.jsonl"
    line = json.dumps({"task_id": "HumanEval/0", "completion": "    return 1\n"}) + "\n"
    rollouts.write_text(line * 200_000)
    proc = subprocess.Popen(
        [sys.executable, "-m", "execgym", "score", "--dataset", "humaneval", str(rollouts)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not _has_open(proc.pid, str(rollouts)):
        time.sleep(0.005)
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, stderr
    assert "Traceback" not in stderr
    assert "Aborted!" not in stderr
    assert "interrupted" in stderr
    assert not (tmp_path / "results.jsonl").exists()


def _has_open(pid: int, path: str) -> bool:
    """Whether process ``pid`` has ``path`` open (it is reading it)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == path:
                return True
        except OSError:
            continue
    return False


def test_limits_too_small_for_the_self_test_say_which_to_raise(
    bwrap_sandbox, tmp_path: Path
) -> None:
    out = tmp_path / "r.jsonl"
    code, _, stderr = run(
        "score", "--dataset", "humaneval", "--solutions", "canonical", "--timeout", "0.001",
        "-o", str(out),
    )  # fmt: skip
    assert code == 1
    assert "self-test" in stderr
    assert "raise them (--timeout / --memory on the command line)" in stderr
    assert not out.exists()


def test_an_output_under_a_directory_we_cannot_search_is_a_clear_error(
    monkeypatch, tmp_path: Path
) -> None:
    # As an ordinary user, -o /root/x.jsonl: even asking whether it exists fails (EACCES).
    hidden = tmp_path / "hidden"
    real_exists = Path.exists

    def exists(self: Path, *args: object, **kwargs: object) -> bool:
        if str(self).startswith(str(hidden)):
            raise PermissionError(13, "Permission denied", str(self))
        return real_exists(self, *args, **kwargs)

    monkeypatch.setattr(Path, "exists", exists)
    output = str(hidden / "x.jsonl")
    args = ("--dataset", "humaneval", "--solutions", "canonical", "-o", output)
    code, _, stderr = run("score", *args)
    assert code == 1, stderr
    assert f"cannot write the results to {output}: Permission denied" in stderr
    assert "Traceback" not in stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--dataset", "humaneval", "missing.jsonl"), "'ROLLOUTS': file 'missing.jsonl' does not"),
        (("missing.jsonl", "other.jsonl"), "'TASKS': file 'missing.jsonl' does not exist"),
        ((".",), "'TASKS': file '.' is a directory"),
    ],
)
def test_a_missing_input_is_named_by_its_role(args: tuple[str, ...], message: str) -> None:
    # With --dataset the one file given is ROLLOUTS, and the error says so.
    code, _, stderr = run("score", *args)
    assert code == 2, stderr
    assert message in stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--reward", "qualty"), "unknown reward 'qualty'"),
        (("--diagnose", "leaks,speed"), "unknown check(s) speed"),
        (("--broker", "amqp://x"), "unknown broker 'amqp://x'"),
    ],
)
def test_an_unknown_option_value_is_bad_usage(args: tuple[str, ...], message: str) -> None:
    # docs/scoring.md: a bad option value exits 2, as --isolation nope does (these exited 1)
    code, _, stderr = run("score", "--dataset", "humaneval", "--solutions", "canonical", *args)
    assert code == 2, stderr
    assert f"Invalid value for '{args[0]}'" in stderr
    assert message in stderr
