"""Repo tasks: JSONL loading, snapshots from directories and tarballs, clear errors."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from execgym.episodes import RepoTask, example_tasks, load_repo_tasks, parse_repo_task, repo_files
from execgym.episodes.task import examples_dir
from execgym.errors import TaskError, TaskNotFound

from .conftest import example


def _task(**fields: object) -> dict[str, object]:
    return {
        "id": "t",
        "repo": "repo",
        "problem_statement": "fix it",
        "fail_to_pass": ["tests/test_a.py::test_a"],
        **fields,
    }


def test_the_examples_cover_a_logic_bug_a_new_function_and_a_refactor() -> None:
    tasks = example_tasks()
    assert [t.id for t in tasks] == [
        "example/pager-last-page",
        "example/semverlite-bump",
        "example/ledger-shared-money",
    ]
    for task in tasks:
        files = repo_files(task)
        assert task.fail_to_pass
        assert task.pass_to_pass
        assert all(name.split("/")[0] in {"tests"} for name in task.hidden_tests)
        assert all(test.split("::")[0] in files for test in task.visible_tests)
    refactor = example("example/ledger-shared-money")
    assert {n.split("::")[0] for n in refactor.fail_to_pass} >= {
        "tests/test_money.py",
        "tests/test_invoice.py",
        "tests/test_report.py",
    }


def test_relative_repos_are_read_beside_the_jsonl(tmp_path: Path) -> None:
    (tmp_path / "repo" / "pkg").mkdir(parents=True)
    (tmp_path / "repo" / "pkg" / "a.py").write_text("x = 1\n")
    (tmp_path / "repo" / ".git").mkdir()
    (tmp_path / "repo" / ".git" / "HEAD").write_text("ref")
    (tmp_path / "repo" / "link.py").symlink_to("/etc/passwd")
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(_task()) + "\n\n")
    [task] = load_repo_tasks(path)
    assert Path(task.repo) == tmp_path / "repo"
    assert repo_files(task) == {"pkg/a.py": b"x = 1\n"}


def test_tarballs_with_one_top_directory_and_file_uris(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in {"proj-1.0/pkg/a.py": b"x = 1\n", "proj-1.0/README": b"hi"}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    (tmp_path / "repo.tar.gz").write_bytes(buffer.getvalue())
    task = parse_repo_task(_task(repo=(tmp_path / "repo.tar.gz").as_uri()))
    assert repo_files(task) == {"pkg/a.py": b"x = 1\n", "README": b"hi"}


def test_a_tarball_entry_leaving_the_repo_is_refused(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo("../evil.py")
        info.size = 1
        archive.addfile(info, io.BytesIO(b"x"))
    (tmp_path / "repo.tar").write_bytes(buffer.getvalue())
    with pytest.raises(TaskError, match="inside the work dir"):
        repo_files(parse_repo_task(_task(repo=str(tmp_path / "repo.tar"))))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"problem_statement": ""}, "problem_statement"),
        ({"max_steps": 0}, "max_steps"),
        ({"hidden_tests": {"../x.py": ""}}, "hidden_tests"),
        ({"fail_to_pass": [], "pass_to_pass": []}, "no hidden tests"),
        ({"test_command": "nose"}, "test_command"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_bad_tasks_name_the_field(fields: dict[str, object], message: str) -> None:
    with pytest.raises(TaskError, match=message):
        parse_repo_task(_task(**fields), source="tasks.jsonl:3")


def test_bad_lines_name_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(_task()) + "\n{not json\n")
    with pytest.raises(TaskError, match=r"tasks.jsonl:2: not JSON"):
        load_repo_tasks(path)
    path.write_text(json.dumps(_task()) + "\n" + json.dumps(_task()) + "\n")
    with pytest.raises(TaskError, match="more than once"):
        load_repo_tasks(path)


def test_missing_repos_and_remote_uris_say_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="neither a directory nor a tarball"):
        repo_files(parse_repo_task(_task(repo=str(tmp_path / "nowhere"))))
    with pytest.raises(TaskError, match="download the tarball first"):
        repo_files(parse_repo_task(_task(repo="s3://bucket/repo.tar.gz")))


def test_unknown_example_ids_list_the_known_ones() -> None:
    from execgym.episodes import make_async

    with pytest.raises(TaskNotFound, match="example/pager-last-page"):
        make_async("example/nope")


def test_examples_are_shipped_in_the_package() -> None:
    assert (examples_dir() / "SOURCE.md").is_file()
    assert isinstance(example_tasks()[0], RepoTask)


def test_a_task_is_taken_as_itself_its_json_or_an_example_id() -> None:
    from execgym.episodes.sync import as_task

    example = example_tasks()[0]
    as_json = example.model_dump_json()
    assert as_task(example) is example
    assert as_task(example.id).id == example.id
    assert as_task(as_json).id == example.id
    assert as_task(json.loads(as_json)).id == example.id
    with pytest.raises(TaskError, match="not valid JSON"):
        as_task("{not json")
