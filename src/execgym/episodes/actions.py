"""What each tool does in the episode's session (everything runs inside the sandbox).

:func:`carry_out` takes a checked :class:`~execgym.episodes.tools.ToolCall` and returns
its observation. Paths are relative to the repo root (``/work``); one that leaves it is
refused before anything runs, and the session's agent resolves symlinks and refuses
them too. ``apply_patch`` feeds the diff to ``git apply`` (or GNU ``patch``) in the
session: no host tool ever reads the agent's patch. ``submit`` is the environment's, not here.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from execgym.episodes import observations
from execgym.episodes.tools import (
    ActionError,
    ApplyPatch,
    ListDir,
    ReadFile,
    RunCommand,
    ToolCall,
    WriteFile,
    repo_path,
)
from execgym.errors import SandboxError, TaskError
from execgym.limits import Limits, MiB
from execgym.sandbox.base import RunResult, Status
from execgym.sandbox.bwrap import WORK_DIR
from execgym.sandbox.session import Session, SessionClosed

TEST_TIMEOUT_S = 300.0
"""Wall-clock seconds ``run_tests`` may take at most (the time budget bounds it too)."""

_PREFIXED = re.compile(r"^(---|\+\+\+) (\S+)", re.MULTILINE)


async def carry_out(
    session: Session,
    call: ToolCall,
    *,
    limits: Limits,
    env: Mapping[str, str],
    visible_tests: Sequence[str],
    max_bytes: int,
    remaining_s: float,
) -> dict[str, Any]:
    """Do ``call`` in ``session``; returns the observation.

    Raises:
        ActionError: for a bad path (the caller makes it an ``ok: false`` observation).
        SessionClosed: if the session closed under the call.
    """
    arguments = call.arguments
    if isinstance(arguments, RunCommand):
        timeout_s = min(arguments.timeout_s, remaining_s)
        run = await _run(session, ["/bin/bash", "-c", arguments.command], limits, env, timeout_s)
        return observations.of_run(call.tool, run, max_bytes)
    if isinstance(arguments, ReadFile):
        return await _read(session, repo_path(arguments.path), max_bytes)
    if isinstance(arguments, WriteFile):
        return await _write(session, repo_path(arguments.path), arguments.content)
    if isinstance(arguments, ListDir):
        return await _list(session, repo_path(arguments.path), max_bytes)
    if isinstance(arguments, ApplyPatch):
        return await _apply_patch(session, arguments.patch, limits, env, remaining_s, max_bytes)
    # run_tests
    python = await asyncio.to_thread(os.path.realpath, sys.executable)
    argv = [python, "-m", "pytest", "-q", "--rootdir", WORK_DIR, "-o", "addopts=", *visible_tests]
    run = await _run(session, argv, limits, env, min(TEST_TIMEOUT_S, remaining_s))
    return observations.of_run(call.tool, run, max_bytes)


async def _run(
    session: Session,
    argv: list[str],
    limits: Limits,
    env: Mapping[str, str],
    timeout_s: float,
    *,
    stdin: bytes = b"",
) -> RunResult:
    timeout_s = max(timeout_s, 0.05)
    run = await session.run(
        argv,
        stdin=stdin,
        env=env,
        limits=limits.merged(wall_time_s=timeout_s, cpu_time_s=timeout_s),
    )
    if run.status is Status.SANDBOX_ERROR and session.closed_because is not None:
        raise SessionClosed(session.closed_because)
    return run


async def _apply_patch(
    session: Session,
    patch: str,
    limits: Limits,
    env: Mapping[str, str],
    remaining_s: float,
    max_bytes: int,
) -> dict[str, Any]:
    """Apply ``patch``: all files or none, the first way that works.

    ``git apply`` (exact context); again with ``--recount`` (the hunk headers' line
    counts of a hand-edited diff are often wrong); then GNU ``patch`` with fuzz 2 (its
    context may be slightly off), checked with ``--dry-run`` first so that it, too,
    changes nothing unless every hunk applies. The observation is the first failure's
    when all fail.
    """
    level = f"-p{_strip_level(patch)}"
    stdin = patch.encode("utf-8") if patch.endswith("\n") else (patch + "\n").encode("utf-8")
    timeout_s = min(60.0, remaining_s)
    gnu = ["/usr/bin/patch", level, "--batch", "--forward", "--fuzz=2", "--no-backup-if-mismatch"]
    attempts = [
        ["/usr/bin/git", "apply", "-v", level, "-"],
        ["/usr/bin/git", "apply", "-v", level, "--recount", "-"],
        [*gnu, "--dry-run"],
    ]
    first: RunResult | None = None
    for number, argv in enumerate(attempts):
        run = await _run(session, argv, limits, env, timeout_s, stdin=stdin)
        if run.exit_code == 0:
            if number == len(attempts) - 1:  # the dry run passed: now for real
                run = await _run(session, gnu, limits, env, timeout_s, stdin=stdin)
            return observations.of_run("apply_patch", run, max_bytes)
        first = first or run
    if first is None:  # attempts is a non-empty literal: the loop ran
        raise RuntimeError("apply_patch made no attempt")
    return observations.of_run("apply_patch", first, max_bytes)


def _strip_level(patch: str) -> int:
    """1 when every file header of the diff has git's ``a/`` / ``b/`` prefixes, else 0."""
    names = [name for _, name in _PREFIXED.findall(patch) if name != "/dev/null"]
    prefixed = names and all(name.startswith(("a/", "b/")) for name in names)
    return 1 if prefixed else 0


async def _read(session: Session, path: str, max_bytes: int) -> dict[str, Any]:
    try:
        content = await session.read_file(path, max_bytes=MiB)
    except SessionClosed:
        raise
    except SandboxError as error:
        reason = str(error).removeprefix("the session could not do it: ")
        return observations.failure("read_file", f"cannot read {path!r}: {reason}")
    text, cut = observations.truncate(content, max_bytes)
    return {"tool": "read_file", "ok": True, "output": text, "path": path, "truncated": cut}


async def _write(session: Session, path: str, content: str) -> dict[str, Any]:
    if path == ".":
        raise ActionError("write_file needs a file path, not the repository root")
    data = content.encode("utf-8", "surrogateescape")
    try:
        await session.write_files({path: data})
    except SessionClosed:
        raise
    except (SandboxError, TaskError) as error:
        reason = str(error).removeprefix("the session could not do it: ")
        return observations.failure("write_file", f"cannot write {path!r}: {reason}")
    message = f"wrote {len(data)} bytes to {path}"
    return {"tool": "write_file", "ok": True, "output": message, "path": path}


async def _list(session: Session, path: str, max_bytes: int) -> dict[str, Any]:
    try:
        entries, more = await session.list_dir(path)
    except SessionClosed:
        raise
    except SandboxError as error:
        reason = str(error).removeprefix("the session could not do it: ")
        return observations.failure("list_dir", f"cannot list {path!r}: {reason}")
    lines = [
        f"{name}/"
        if kind == "dir"
        else f"{name}  ({size} bytes)"
        if kind == "file"
        else f"{name}  ({kind})"
        for name, kind, size in entries
    ]
    text, cut = observations.truncate("\n".join(lines), max_bytes)
    return {
        "tool": "list_dir",
        "ok": True,
        "output": text + ("\n[... more entries not listed ...]" if more else ""),
        "path": path,
        "entries": [{"name": n, "kind": k, "size_bytes": s} for n, k, s in entries],
        "truncated": cut or more,
    }
