"""`execgym data`, `execgym storage gc`, `execgym checkpoints` and `score --store`."""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from execgym.cli import main
from execgym.storage import open_store
from execgym.testing import FakeClock, MotoS3Server
from tests.conftest import ONE_TASK, write_jsonl


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(params=["local", "s3"])
def store_url(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> str:
    """A fresh store as the CLI sees it: S3 through the environment, as in production."""
    if request.param == "local":
        return str(tmp_path / "store")
    server: MotoS3Server = request.getfixturevalue("s3_server")
    monkeypatch.setenv("EXECGYM_S3_ENDPOINT_URL", server.endpoint_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", server.key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", server.secret)
    return request.getfixturevalue("s3_url")


def test_push_pull_ls_by_name_and_pinned_version(store_url: str, tmp_path: Path) -> None:
    source = tmp_path / "suite"
    (source / "tests").mkdir(parents=True)
    (source / "tasks.jsonl").write_text('{"task_id": "t/1"}\n')
    (source / "tests" / "test_a.py").write_text("def test_a():\n    pass\n")

    code, stdout, stderr = run(
        "data", "push", str(source), "--name", "suite", "--meta", "kind=tests", "--store", store_url
    )
    assert code == 0, stdout + stderr
    v1 = stdout.strip()
    assert re.fullmatch(r"[0-9a-f]{64}", v1)
    assert f"pushed suite@{v1[:12]}: 2 files" in stderr

    (source / "tasks.jsonl").write_text('{"task_id": "t/2"}\n')
    code, stdout, _ = run("data", "push", str(source), "--name", "suite", "--store", store_url)
    v2 = stdout.strip()
    assert code == 0
    assert v2 != v1

    code, stdout, stderr = run(
        "data", "pull", f"suite@{v1[:8]}", str(tmp_path / "v1"), "--store", store_url
    )
    assert code == 0, stdout + stderr
    assert f"pulled suite@{v1}: 2 files" in stdout
    assert (tmp_path / "v1" / "tasks.jsonl").read_text() == '{"task_id": "t/1"}\n'
    assert (tmp_path / "v1" / "tests" / "test_a.py").exists()
    code, stdout, _ = run("data", "pull", "suite", str(tmp_path / "latest"), "--store", store_url)
    assert code == 0
    assert v2 in stdout
    assert (tmp_path / "latest" / "tasks.jsonl").read_text() == '{"task_id": "t/2"}\n'

    code, stdout, _ = run("data", "ls", "--store", store_url)
    assert code == 0
    header, line = stdout.splitlines()
    assert header.split() == ["NAME", "VERSIONS", "LATEST", "PUSHED", "SIZE"]
    assert line.split()[:3] == ["suite", "2", v2[:12]]
    code, stdout, _ = run("data", "ls", "suite", "--store", store_url)
    assert [row.split()[0] for row in stdout.splitlines()[1:]] == [v2, v1]  # newest first
    code, stdout, _ = run("data", "ls", "suite", "--json", "--store", store_url)
    records = [json.loads(row) for row in stdout.splitlines()]
    assert [r["version"] for r in records] == [v1, v2]
    assert records[0]["metadata"] == {"kind": "tests"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("data", "pull", "nope", "DEST"), "no data set named 'nope'"),
        (("data", "pull", "suite@ffff0000", "DEST"), "no version starting with ffff0000"),
        (("data", "pull", "suite@xyz", "DEST"), "a version is the hex hash"),
        (("data", "push", "SRC", "--name", "bad/name"), "invalid data set name 'bad/name'"),
        (("data", "rm", "suite"), "NAME@VERSION"),
        (("storage", "gc", "--log-ttl", "week"), "invalid duration 'week'"),
        (("checkpoints", "add", "s3://m/1", "--step", "1", "--dataset", "nope"), "no data set"),
        (("checkpoints", "rm", "abc"), "no checkpoint with id 'abc'"),
    ],
)
def test_errors_say_what_is_wrong(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    store = str(tmp_path / "store")
    (tmp_path / "SRC").write_text("x")
    assert run("data", "push", str(tmp_path / "SRC"), "--name", "suite", "--store", store)[0] == 0
    args = tuple(str(tmp_path / a) if a in ("DEST", "SRC") else a for a in args)
    code, stdout, stderr = run(*args, "--store", store)
    assert code != 0
    assert message in stdout + stderr


def test_an_unreachable_store_and_a_missing_bucket_are_clear_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, s3_server: MotoS3Server
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    monkeypatch.setenv("EXECGYM_S3_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens
    code, _stdout, stderr = run("data", "ls", "--store", "s3://bucket/x")
    assert code == 1
    assert "cannot reach its root in the store s3://bucket/x: Could not connect" in stderr
    assert "EXECGYM_S3_ENDPOINT_URL" in stderr
    monkeypatch.setenv("EXECGYM_S3_ENDPOINT_URL", s3_server.endpoint_url)
    code, _, stderr = run(
        "data", "push", str(Path(__file__)), "--name", "x", "--store", "s3://no-such-bucket/x"
    )
    assert code == 1
    assert "the bucket 'no-such-bucket' of the store s3://no-such-bucket/x does not exist" in stderr

    tasks = write_jsonl(tmp_path / "tasks.jsonl", [{**ONE_TASK, "reference": "    return 1\n"}])
    out = tmp_path / "results.jsonl"
    code, _, stderr = run(
        "score", str(tasks), "--solutions", "canonical", "-o", str(out),
        "--store", "s3://no-such-bucket/x",
    )  # fmt: skip
    assert code == 1
    assert "does not exist" in stderr
    assert not out.exists()  # refused before anything was scored
    code, _, stderr = run(
        "score", str(tasks), "--solutions", "canonical", "-o", str(out),
        "--store", str(tmp_path / "store"), "--batch-id", "a/b",
    )  # fmt: skip
    assert code == 2
    assert "invalid --batch-id 'a/b'" in stderr
    assert not out.exists()


def test_gc_removes_expired_logs_and_keeps_what_a_version_references(
    tmp_path: Path,
) -> None:
    url = str(tmp_path / "store")
    long_ago = FakeClock(datetime.now(UTC) - timedelta(days=10))
    old = open_store(url, clock=long_ago)
    old.put_log("old-batch", b"old results\n")
    source = tmp_path / "tasks.jsonl"
    source.write_text('{"task_id": "t/1"}\n')
    version = old.push(source, name="ds").version
    two_hours_ago = datetime.now(UTC).timestamp() - 7200  # past the grace period
    for path in (tmp_path / "store" / "blobs").rglob("*"):
        os.utime(path, (two_hours_ago, two_hours_ago))
    open_store(url).put_log("new-batch", b"new results\n")

    code, stdout, _ = run("storage", "gc", "--dry-run", "--store", url)
    assert code == 0
    assert stdout.startswith("would remove: 1 expired logs, 0 versions, 0 manifests, 1 blobs")
    assert "log old-batch/log" in stdout
    assert len(open_store(url).logs()) == 2

    code, stdout, _ = run("storage", "gc", "--log-ttl", "7d", "--store", url)
    assert code == 0
    assert stdout.startswith("removed: 1 expired logs, 0 versions, 0 manifests, 1 blobs")
    assert "kept: 1 manifests, 2 referenced blobs, 1 logs" in stdout
    assert [r.batch_id for r in open_store(url).logs()] == ["new-batch"]
    code, stdout, _ = run("data", "pull", f"ds@{version}", str(tmp_path / "out"), "--store", url)
    assert code == 0
    assert (tmp_path / "out" / "tasks.jsonl").read_text() == '{"task_id": "t/1"}\n'
    code, stdout, _ = run("storage", "logs", "--store", url)
    assert "new-batch" in stdout
    assert "old-batch" not in stdout


def test_checkpoints_add_ls_rm_and_they_pin_their_version(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    (tmp_path / "a.jsonl").write_text("{}\n")
    version = run("data", "push", str(tmp_path / "a.jsonl"), "--name", "ds", "--store", url)[
        1
    ].strip()
    code, stdout, stderr = run(
        "checkpoints", "add", "s3://models/run-1/step-10", "--step", "10",
        "--dataset", "ds", "--meta", "loss=0.25", "--store", url,
    )  # fmt: skip
    assert code == 0, stdout + stderr
    checkpoint_id = stdout.strip()
    assert f"on ds@{version[:12]}" in stderr
    code, stdout, _ = run("checkpoints", "ls", "--json", "--store", url)
    (record,) = [json.loads(line) for line in stdout.splitlines()]
    assert record["dataset_version"] == version
    assert record["metadata"] == {"loss": 0.25}
    code, stdout, stderr = run("data", "rm", f"ds@{version[:6]}", "--store", url)
    assert code == 1
    assert checkpoint_id in stderr
    assert run("checkpoints", "rm", checkpoint_id[:5], "--store", url)[0] == 0
    assert run("data", "rm", f"ds@{version[:6]}", "--store", url)[0] == 0
    assert run("data", "ls", "--store", url)[1].strip().endswith("is empty")


def test_score_with_store_uploads_the_results_as_a_batch_log(bwrap_sandbox, tmp_path: Path) -> None:
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [{**ONE_TASK, "reference": "    return 1\n"}])
    out = tmp_path / "results.jsonl"
    url = str(tmp_path / "store")
    code, stdout, stderr = run(
        "score", str(tasks), "--solutions", "canonical", "-o", str(out),
        "--store", url, "--batch-id", "run-1.step-0",
    )  # fmt: skip
    assert code == 0, stdout + stderr
    assert f"batch log: run-1.step-0/results.jsonl in {url}" in stdout
    (log,) = open_store(url).logs("run-1.step-0")
    assert open_store(url).read_log(log) == out.read_bytes()
    assert json.loads(out.read_text())["verdict"] == "passed"


def test_storage_verify_names_corrupted_blobs_and_exits_1(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    source = tmp_path / "a.jsonl"
    source.write_text('{"task_id": "t/1"}\n')
    assert run("data", "push", str(source), "--name", "ds", "--store", url)[0] == 0
    code, stdout, _ = run("storage", "verify", "--store", url)
    assert code == 0
    assert stdout.startswith("checked 1 blobs (19 B) and 1 manifests")
    (blob,) = [p for p in (tmp_path / "store" / "blobs").rglob("*") if p.is_file()]
    blob.write_text('{"task_id": "t/X"}\n')
    code, stdout, stderr = run("storage", "verify", "--delete-corrupted", "--store", url)
    assert code == 1
    assert f"corrupted: blobs/{blob.parent.name}/{blob.name} (deleted)" in stdout
    assert "1 corrupted and 0 missing" in stderr
    assert run("data", "push", str(source), "--name", "ds", "--store", url)[0] == 0
    assert run("storage", "verify", "--store", url)[0] == 0
