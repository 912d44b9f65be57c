"""Build the real SWE-style tasks in this directory from the projects' own git history.

For each (project, fix commit) below: the repository at the fix's parent commit
(``git archive`` of the files the tests need, gzip-compressed, in ``snapshots/``), the
fix split into ``patch`` (the source files) and ``test_patch`` (the test files it
added or changed), and FAIL_TO_PASS / PASS_TO_PASS found by running the test files
twice in the tasks' environment (``ENVIRONMENT``: the Debian test image of
``tests/environments/images.py`` plus pytest from PyPI, a declarative spec): once with
only the test patch applied (before) and once with the fix too (after). A candidate
whose gold patch does not resolve, or whose tests show no FAIL_TO_PASS, is left out.

Run (needs bwrap, mmdebstrap/umoci/skopeo for the image, network for the pip build)::

    python tests/data/swe/build.py /work/.mirror    # holds <owner>+<name>/repo clones

It rewrites ``instances.jsonl``, ``snapshots/``, ``licenses/``. Sources: SOURCE.md.
"""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ENVIRONMENT: dict[str, Any] = {
    "base": "debian",
    "pip": ["pytest==8.4.2", "freezegun==1.5.5"],
}
"""The tasks' environment: the Debian test image imported as ``debian``, plus pytest."""

PROJECTS: dict[str, dict[str, Any]] = {
    "more-itertools/more-itertools": {
        "licence": "LICENSE",
        "paths": ["more_itertools", "tests", "pyproject.toml", "LICENSE"],
        "commits": ["d992be0", "958990e", "f51a53b", "edb3346", "a51da82"],
    },
    "pytoolz/toolz": {
        "licence": "LICENSE.txt",
        "paths": ["toolz", "tlz", "pyproject.toml", "setup.cfg", "LICENSE.txt"],
        "commits": ["5a7e078", "c696ac6", "adc70fd"],
    },
    "python-humanize/humanize": {
        "licence": "LICENCE",
        "paths": ["src", "tests", "pyproject.toml", "LICENCE"],
        "commits": ["823ad60", "7574e0c", "a47a89e", "11e62ee", "38c9968"],
        # hatch-vcs writes _version.py at install time; the src layout needs src on sys.path
        "generated": {"src/humanize/_version.py": '__version__ = version = "0+snapshot"\n'},
        "test_args": ["-o", "pythonpath=src"],
    },
    "astanin/python-tabulate": {
        "licence": "LICENSE",
        "paths": ["tabulate", "test", "pyproject.toml", "LICENSE"],
        "commits": ["e6a24aa", "3aa568c", "032dc0d", "87a9a4e", "c59a5ff"],
    },
}
PER_PROJECT = 4
FLAKY = frozenset({"tests/test_more.py::TestConcurrentTee::test_concurrent_consumers"})
"""Tests left out of both lists: timing-dependent (threads racing), they fail on a loaded
machine whatever the patch (seen failing in a "before" run on this 2-core machine)."""


def git(repo: Path, *args: str) -> bytes:
    """Output of ``git -C repo args`` (raises on failure)."""
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True).stdout


def is_test(path: str) -> bool:
    """Whether a changed file belongs to the test patch (SWE-bench's rule: a test dir/file)."""
    parts = path.split("/")
    return any(p in ("tests", "test", "testing") or p.startswith("test_") for p in parts)


def split_diff(diff: str, keep: set[str]) -> tuple[str, str]:
    """``(patch, test_patch)`` of a ``git show`` diff; files outside ``keep`` are dropped."""
    patch, tests = [], []
    for chunk in diff.split("diff --git ")[1:]:
        name = chunk.split("\n", 1)[0].split(" b/", 1)[1]
        if name not in keep or name.endswith((".po", ".mo")):
            continue  # outside the snapshot (docs, translations)
        (tests if is_test(name) else patch).append("diff --git " + chunk)
    return "".join(patch), "".join(tests)


def snapshot(repo: Path, commit: str, paths: list[str], generated: dict[str, str]) -> bytes:
    """A gzip tarball of ``paths`` at ``commit`` (only those that exist there)."""
    present = set(git(repo, "ls-tree", "--name-only", commit).decode().split())
    chosen = [p for p in paths if p.split("/")[0] in present]
    raw = git(repo, "archive", "--format=tar", commit, "--", *chosen)
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(raw)) as source,
        tarfile.open(fileobj=out, mode="w:gz", compresslevel=9) as target,
    ):
        for member in source:
            if member.isfile() and not member.name.endswith((".po", ".mo")):
                member.mtime, member.uid, member.gid, member.uname, member.gname = 0, 0, 0, "", ""
                target.addfile(member, source.extractfile(member))
        for name, text in generated.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(text.encode()), 0o644
            target.addfile(info, io.BytesIO(text.encode()))
    return out.getvalue()


async def outcomes(task: Any, files: dict[str, bytes], patch: str, sandbox: Any) -> dict[str, str]:
    """Every test of the task's test files and its outcome, with ``patch`` applied."""
    from execgym.episodes.grading import Grader
    from execgym.episodes.swe import apply_patch, patched_paths, repo_task
    from execgym.limits import Limits

    repo = repo_task(task, files)
    probe = repo.model_copy(
        update={"fail_to_pass": patched_paths(task.swe.test_patch), "pass_to_pass": []}
    )
    final = apply_patch(files, patch)
    judged = await Grader(sandbox).judge_tree(
        probe, files, final, limits=Limits(wall_time_s=120, cpu_time_s=120)
    )
    return {str(t["name"]): str(t["outcome"]) for t in judged.details.get("tests", [])}


async def build(mirror: Path) -> None:
    """Write every instance (see the module docstring)."""
    from tests.environments.images import build_test_image

    from execgym.environments import EnvironmentCache
    from execgym.environments.routing import resolve, with_environment
    from execgym.episodes.swe import snapshot_files
    from execgym.sandbox import open_sandbox
    from execgym.tasks.models import Task

    cache = EnvironmentCache()
    try:
        cache.get("debian")
    except Exception:
        cache.import_image(f"{build_test_image() / 'layout'}:base", name="debian")
    sandbox = with_environment(open_sandbox("bwrap"), resolve(ENVIRONMENT, cache))
    (HERE / "snapshots").mkdir(exist_ok=True)
    (HERE / "licenses").mkdir(exist_ok=True)
    candidates: list[tuple[str, dict[str, Any], Path]] = []
    for project, spec in PROJECTS.items():
        repo = mirror / project.replace("/", "+") / "repo"
        licence = git(repo, "show", f"HEAD:{spec['licence']}")
        (HERE / "licenses" / f"{project.replace('/', '+')}-{spec['licence']}").write_bytes(licence)
        for short in spec["commits"]:
            commit = git(repo, "rev-parse", short).decode().strip()
            parent = git(repo, "rev-parse", f"{commit}^").decode().strip()
            name = f"{project.split('/')[1]}-{short}"
            archive = snapshot(repo, parent, spec["paths"], spec.get("generated", {}))
            diff = git(repo, "show", "--format=", "--no-color", "--no-renames", commit).decode()
            patch, test_patch = split_diff(diff, _tree(repo, commit, spec["paths"]))
            if not patch or not test_patch:
                print(f"skip {name}: no source or no test change", file=sys.stderr)
                continue
            path = HERE / "snapshots" / f"{name}.tar.gz"
            path.write_bytes(archive)
            message = git(repo, "log", "-1", "--format=%B", commit).decode().strip()
            instance = {
                "instance_id": name,
                "repo": project,
                "base_commit": parent,
                "fix_commit": commit,
                "patch": patch,
                "test_patch": test_patch,
                "problem_statement": message,
                "snapshot": f"snapshots/{name}.tar.gz",
                "environment": ENVIRONMENT,
                "test_args": spec.get("test_args", []),
                "FAIL_TO_PASS": [],
                "PASS_TO_PASS": ["-"],
            }
            candidates.append((project, instance, path))
    slots = asyncio.Semaphore(6)

    async def measure(instance: dict[str, Any], path: Path) -> tuple[dict[str, str], ...]:
        task = Task.model_validate({**instance, "snapshot": str(path)})
        files = snapshot_files(task)
        async with slots:
            return await asyncio.gather(
                outcomes(task, files, "", sandbox),
                outcomes(task, files, instance["patch"], sandbox),
            )

    measured = await asyncio.gather(*(measure(i, p) for _, i, p in candidates))
    lines: list[str] = []
    kept: dict[str, int] = {}
    for (project, instance, path), (before, after) in zip(candidates, measured, strict=True):
        name = instance["instance_id"]
        after = {n: o for n, o in after.items() if n not in FLAKY}
        f2p = sorted(n for n, o in after.items() if o == "passed" and before.get(n) != "passed")
        p2p = sorted(n for n, o in after.items() if o == "passed" and before.get(n) == "passed")
        broken = sorted(n for n, o in before.items() if o == "passed" and after.get(n) != "passed")
        if not f2p or broken or kept.get(project, 0) == PER_PROJECT:
            print(f"skip {name}: FAIL_TO_PASS {f2p}, broken by the fix {broken}", file=sys.stderr)
            path.unlink()
            continue
        instance.update(FAIL_TO_PASS=f2p, PASS_TO_PASS=p2p)
        lines.append(json.dumps(instance, sort_keys=True))
        print(f"{name}: {len(f2p)} FAIL_TO_PASS, {len(p2p)} PASS_TO_PASS", file=sys.stderr)
        kept[project] = kept.get(project, 0) + 1
    await sandbox.aclose()
    (HERE / "instances.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _tree(repo: Path, commit: str, paths: list[str]) -> set[str]:
    listed = git(repo, "ls-tree", "-r", "--name-only", f"{commit}^", "--", *paths).decode()
    new = git(repo, "ls-tree", "-r", "--name-only", commit, "--", *paths).decode()
    return set(listed.split()) | set(new.split())


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parents[2]))
    asyncio.run(build(Path(sys.argv[1] if len(sys.argv) > 1 else "/work/.mirror")))
