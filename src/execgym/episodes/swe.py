"""SWE-bench-style instances as repo tasks, and their predictions scored.

The SWE-bench harness (``swebench/harness/test_spec/python.py``, ``make_eval_script_list``,
SWE-bench 2.x) applies the model's patch to the repository at ``base_commit``, checks the
files the ``test_patch`` touches out of ``base_commit`` again, applies the ``test_patch``,
runs those test files and calls the instance *resolved* when every ``FAIL_TO_PASS`` and
``PASS_TO_PASS`` test passes. Here the same steps run with the trust boundary made
explicit:

1. both patches are applied to plain copies of the files (``git apply``, confined by
   bwrap to a private directory; a patch is data and nothing of it runs), the model's
   patch first;
2. the tree is cleaned as an agent's final tree is (:func:`execgym.episodes.grading.clean_tree`):
   the test patch's files written fresh, every other file in their directories and every
   ``conftest.py``/pytest configuration restored from the snapshot;
3. the test files run in a fresh sandbox of the instance's environment under the pytest
   harness, whose report channel the patched code cannot write to (a replaced report
   function is ``tampered``). A node id that did not run counts as failed.

A patch that does not apply is the rollout's failure (reward 0, verdict ``failed``), never
a mask.

>>> task = repo_task(load_instances("instances.jsonl")[0])    # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from execgym.episodes.grading import Grader
from execgym.episodes.task import RepoTask, repo_files
from execgym.errors import TaskError
from execgym.judges.base import ErrorDetail, Judgement, Verdict
from execgym.limits import Limits
from execgym.sandbox.base import Sandbox
from execgym.tasks.models import Task
from execgym.tasks.swe import SweFields, is_instance, task_from_instance


class PatchError(TaskError):
    """A patch does not apply to the files it is given; the message says why."""


def patched_paths(patch: str) -> list[str]:
    """The files a unified diff changes, creates or deletes (``b/`` side, else ``a/``)."""
    names: list[str] = []
    for line in patch.splitlines():
        if line.startswith(("+++ ", "--- ")):
            name = line[4:].split("\t", 1)[0].strip()
            if name != "/dev/null" and name[:2] in ("a/", "b/"):
                names.append(name[2:])
    return list(dict.fromkeys(names))


def apply_patch(files: dict[str, bytes], patch: str, *, what: str = "patch") -> dict[str, bytes]:
    """``files`` with ``patch`` (a unified diff, ``-p1`` paths) applied.

    The files are written to a private temporary directory and ``git apply`` (as
    SWE-bench does first; ``patch --batch --fuzz=5 -p1`` is its fallback and ours) changes
    them there, confined by bwrap to that directory; nothing in the patch is run. An
    empty patch changes nothing.

    Args:
        files: The tree, ``{relative name: contents}``.
        patch: The diff.
        what: What the patch is, for the error message.

    Returns:
        The new tree (files the patch deletes are gone).

    Raises:
        PatchError: the patch is malformed, names a path outside the tree, or does not
            apply (the message ends with git's and patch's own words).
    """
    if not patch.strip():
        return dict(files)
    if not patch.endswith("\n"):
        patch += "\n"
    with tempfile.TemporaryDirectory(prefix="execgym-patch-") as scratch:
        root = Path(scratch, "tree")
        for name, content in files.items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
        root.mkdir(exist_ok=True)
        diff = Path(scratch, "change.diff")
        diff.write_text(patch, encoding="utf-8", errors="surrogateescape")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": scratch, "LC_ALL": "C"}
        tried = [
            ["git", "apply", "--whitespace=nowarn", "-p1", str(diff)],
            ["patch", "--batch", "--fuzz=5", "-p1", "--no-backup-if-mismatch", "-i", str(diff)],
        ]
        said: list[str] = []
        for argv in tried:
            if shutil.which(argv[0]) is None:
                said.append(f"{argv[0]}: not installed")
                continue
            done = subprocess.run(
                _confined(argv, Path(scratch)),
                cwd=root,
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            if done.returncode == 0:
                return _read_tree(root)
            said.append(f"{argv[0]}: {(done.stderr or done.stdout).strip()[-800:]}")
    raise PatchError(f"the {what} does not apply: " + "; ".join(said))


def _confined(argv: list[str], scratch: Path) -> list[str]:
    """``argv`` under bwrap: the host read-only, only ``scratch`` writable, no network.

    git and patch only read the diff as data, but the patch is a model's: it is applied
    where nothing else on the host can be touched (as the episodes' ``apply_patch`` tool
    runs it in the session). Without bwrap the command runs as it is.
    """
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return argv
    return [
        bwrap,
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",  # noqa: S108 (a private tmpfs inside the sandbox)
        "--bind",
        str(scratch),
        str(scratch),
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--chdir",
        str(scratch / "tree"),
        "--",
        *argv,
    ]


def _read_tree(root: Path) -> dict[str, bytes]:
    tree: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and not path.name.endswith((".orig", ".rej")):
            tree[path.relative_to(root).as_posix()] = path.read_bytes()
    return tree


def _fields(task: Task) -> SweFields:
    if task.swe is None:
        raise TaskError(f"task {task.task_id} is not a swe task (kind {task.kind!r})")
    return task.swe


def repo_task(task: Task, files: dict[str, bytes] | None = None) -> RepoTask:
    """The :class:`RepoTask` of a ``swe`` task: hidden tests = its test patch's files.

    Args:
        task: A task of kind ``swe`` (or validated from a SWE-bench instance).
        files: The snapshot's files, if already read.

    Raises:
        TaskError: the snapshot is unreadable; PatchError: the test patch does not apply.
    """
    swe = _fields(task)
    original = files if files is not None else snapshot_files(task)
    tested = apply_patch(original, swe.test_patch, what=f"test_patch of {task.task_id}")
    hidden = {
        name: tested[name].decode("utf-8", "surrogateescape")
        for name in patched_paths(swe.test_patch)
        if name in tested
    }
    environment = task.environment
    return RepoTask(
        id=task.task_id,
        repo=swe.snapshot,
        problem_statement=task.prompt or task.task_id,
        visible_tests=[],
        hidden_tests=hidden,
        fail_to_pass=list(swe.fail_to_pass),
        pass_to_pass=list(swe.pass_to_pass),
        environment=environment,
        test_args=list(swe.test_args),
    )


def snapshot_files(task: Task) -> dict[str, bytes]:
    """The files of a ``swe`` task's snapshot (relative paths from the working directory)."""
    swe = _fields(task)
    probe = RepoTask(id=task.task_id, repo=swe.snapshot, problem_statement="-", pass_to_pass=["-"])
    return repo_files(probe)


def load_instances(path: str | Path) -> list[Task]:
    """Read a JSONL file of SWE-bench-style instances as ``swe`` tasks.

    A relative ``snapshot`` is read from the file's directory.

    Raises:
        TaskError: naming the file, the line and what is wrong.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise TaskError(f"cannot read SWE instances from {path}: {error.strerror}") from error
    tasks: list[Task] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            data: Any = json.loads(line)
        except json.JSONDecodeError as error:
            raise TaskError(f"{where}: not JSON ({error.msg})") from error
        if not is_instance(data):
            raise TaskError(
                f"{where}: not a SWE-bench instance (needs instance_id, FAIL_TO_PASS, test_patch)"
            )
        snapshot = data.get("snapshot")
        if isinstance(snapshot, str) and "://" not in snapshot and not Path(snapshot).is_absolute():
            data["snapshot"] = str(path.parent / snapshot)
        try:
            tasks.append(Task.model_validate(task_from_instance(data)))
        except ValueError as error:
            raise TaskError(f"{where}: {error}") from error
    return tasks


def test_files_of(task: Task) -> list[str]:
    """The test files the task's hidden tests live in (what the scoring run runs)."""
    swe = _fields(task)
    ids = [*swe.fail_to_pass, *swe.pass_to_pass]
    return list(dict.fromkeys(str(PurePosixPath(node.split("::", 1)[0])) for node in ids))


# The judge of ``swe`` tasks (:class:`~execgym.scoring.core.Scoring` hands it to its
# JudgeSet: judges/ never imports episodes/).


class SweJudge:
    """Judge ``swe`` tasks: a prediction's patch scored as the SWE-bench harness does.

    The completion is the model's patch (``model_patch``); the steps are the module
    docstring's, in the sandbox :class:`~execgym.scoring.core.Scoring` hands in (one of
    the task's environment). ``passed`` (resolved) iff every ``FAIL_TO_PASS`` and
    ``PASS_TO_PASS`` node id passed; ``details["node_outcomes"]`` holds each one's
    outcome and ``details["resolved"]`` the SWE-bench verdict.

    Args:
        max_concurrent: Most test runs at once (each a pytest process).
    """

    name = "swe"

    def __init__(self, max_concurrent: int = 8) -> None:
        self._grader: Grader | None = None
        self._max_concurrent = max_concurrent
        self._prepared: dict[str, tuple[RepoTask, dict[str, bytes]]] = {}

    def _prepare(self, task: Task) -> tuple[RepoTask, dict[str, bytes]]:
        key = task.model_dump_json()
        found = self._prepared.get(key)
        if found is None:
            files = snapshot_files(task)
            found = self._prepared[key] = (repo_task(task, files), files)
        return found

    async def judge(
        self,
        task: Task,
        completion: str,
        sandbox: Sandbox,
        limits: Limits,
        *,
        files: Mapping[str, str] | None = None,
    ) -> Judgement:
        """Apply ``completion`` (a unified diff) and run the hidden tests; see the module."""
        if self._grader is None:
            self._grader = Grader(sandbox, max_concurrent=self._max_concurrent)
        try:
            repo, original = await asyncio.to_thread(self._prepare, task)
        except TaskError as error:  # the task's own snapshot or test patch: masked
            message = f"task {task.task_id} cannot be prepared: {error}"
            return Judgement(
                Verdict.INVALID, error=ErrorDetail("InvalidTask", message), message=message
            )
        try:
            final = await asyncio.to_thread(apply_patch, original, completion, what="model patch")
        except PatchError as error:  # the rollout's patch: its failure, never a mask
            details = {"resolved": False, "patch_applied": False}
            return Judgement(
                Verdict.FAILED,
                error=ErrorDetail("PatchDoesNotApply", str(error)),
                message=str(error),
                details=details,
            )
        judged = await self._grader.judge_tree(
            repo, original, final, limits=limits, sandbox=sandbox
        )
        details = {
            **judged.details,
            "resolved": judged.verdict is Verdict.PASSED,
            "patch_applied": True,
        }
        return Judgement(judged.verdict, judged.run, judged.error, judged.message, details)
