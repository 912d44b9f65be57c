"""Shared fixtures: capability checks (skip locally, fail in CI) and sandboxes."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import pytest

from execgym.sandbox import (
    BubblewrapSandbox,
    RunRequest,
    RunResult,
    Sandbox,
    UnisolatedSandbox,
    WarmPoolSandbox,
)
from execgym.sandbox._cgroup import CgroupHost, detect_cgroups, flush_removals
from execgym.sandbox.gvisor import GVisorSandbox

CI = bool(os.environ.get("CI"))


def default_signals() -> None:
    """``preexec_fn`` for a child that is sent SIGINT or SIGQUIT: undo an inherited ignore.

    A shell without job control starts background commands (``cmd &``) with SIGINT and
    SIGQUIT ignored, and an ignored signal stays ignored across ``exec``: execgym would
    rightly keep ignoring it, and a test that interrupts it would hang.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def require(available: bool, what: str) -> None:
    """Skip when a capability is missing here, but fail in CI: nothing is silently skipped."""
    if not available:
        if CI:
            pytest.fail(f"{what} is required in CI")
        pytest.skip(f"{what} is not available on this host")


def toolchain_dirs() -> dict[str, set[str]]:
    """What the default read-only paths add beyond /usr and the interpreter's prefix:
    ``{top-level dir: {its entries}}``, e.g. ``{"etc": {"java-17-openjdk"}, "opt":
    {"execgym"}, "root": {".rustup"}}`` (toolchains found outside /usr, site-packages)."""
    from execgym.sandbox.bwrap import default_read_only_paths, interpreter_paths, resolve_paths

    interpreter = {inside for _, inside in resolve_paths(interpreter_paths())}
    dirs: dict[str, set[str]] = {}
    for _, inside in resolve_paths(default_read_only_paths()):
        if inside not in interpreter:
            parts = Path(inside).parts
            dirs.setdefault(parts[1], set()).add(parts[2] if len(parts) > 2 else "")
    return dirs


def descendants(root: int) -> dict[int, str]:
    """``{pid: state}`` of every descendant of ``root``, zombies (``Z``) included."""
    parents: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            parents[int(entry.name)] = (int(fields[1]), fields[0])
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, state) in parents.items():
            if ppid == parent and pid not in found:
                found[pid] = state
                frontier.append(pid)
    return found


def python(code: str) -> list[str]:
    """argv that runs ``code`` with the test interpreter, resolved as in the sandbox."""
    return [os.path.realpath(sys.executable), "-I", "-S", "-c", code]


async def run_code(sandbox: Sandbox, code: str, **options: Any) -> RunResult:
    """Run the Python program ``code`` the way ``sandbox`` runs Python (the warm pool
    forks it from its zygote; the others start an interpreter on it as ``runner.py``);
    ``options`` are the other :class:`RunRequest` fields."""
    return await sandbox.run(RunRequest(python_source=code.encode(), **options))


@pytest.fixture(autouse=True)
def _clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("EXECGYM_", "AWS_", "REDIS_")):
            monkeypatch.delenv(name)


@pytest.fixture
def bwrap_sandbox() -> BubblewrapSandbox:
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    return BubblewrapSandbox()


@pytest.fixture
async def prestarted_sandbox() -> AsyncIterator[BubblewrapSandbox]:
    """bwrap with one sandbox prestarted ahead of each run (``prestart=1``)."""
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    from execgym.sandbox._prestart import prestart_possible

    require(prestart_possible(), "a cgroup that measures CPU time (prestarting needs one)")
    async with BubblewrapSandbox(prestart=1) as sandbox:
        yield sandbox
    assert run_cgroups(kind="ready") == [], "a prestarted sandbox's cgroup was left"


@pytest.fixture
def gvisor_sandbox() -> GVisorSandbox:
    require(shutil.which("runsc") is not None, "gVisor (apt-get install -y runsc)")
    require(os.geteuid() == 0, "root (runsc needs it)")
    return GVisorSandbox()


@pytest.fixture
async def pool_sandbox(bwrap_sandbox: BubblewrapSandbox) -> AsyncIterator[WarmPoolSandbox]:
    """The warm pool, its zygote started; closed (with every run it forked) afterwards."""
    async with WarmPoolSandbox() as pool:
        yield pool


@pytest.fixture
def none_sandbox() -> UnisolatedSandbox:
    return UnisolatedSandbox(allow_root=True)


@pytest.fixture(params=["bwrap", "gvisor", "none"])
def sandbox(request: pytest.FixtureRequest) -> Sandbox:
    return request.getfixturevalue(f"{request.param}_sandbox")


@pytest.fixture
def no_cgroups(monkeypatch: pytest.MonkeyPatch) -> None:
    """This host as an ordinary user's without a writable cgroup (limits fall back to
    rlimits and sampling): every execgym module's ``detect_cgroups`` finds none."""
    from execgym.sandbox import _cgroup

    real, none = _cgroup.detect_cgroups, CgroupHost(None, reason="hidden by the test")
    for name, module in list(sys.modules.items()):
        if name.startswith("execgym.") and getattr(module, "detect_cgroups", None) is real:
            monkeypatch.setattr(module, "detect_cgroups", lambda: none)


LIST_FDS = "import os; print(sorted(int(fd) for fd in os.listdir('/proc/self/fd')))"
"""A Python program that prints its open descriptors as a JSON list."""


@pytest.fixture
def inheritable_host_pipe() -> Iterable[int]:
    """A host pipe's write end on fd 200, inheritable: as a trainer's launcher might leave
    one. Yields its number; closed afterwards."""
    read_end, write_end = os.pipe()
    leaked = os.dup2(write_end, 200, inheritable=True)
    try:
        yield leaked
    finally:
        for fd in (read_end, write_end, leaked):
            os.close(fd)


@pytest.fixture
def needs_cgroup() -> None:
    host = detect_cgroups()
    require(host.version is not None, f"a writable cgroup hierarchy ({host.reason})")


def processes_with(text: str) -> list[int]:
    """Pids of live processes whose command line contains ``text`` (leak checks)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def run_cgroups(pid: int | None = None, *, kind: str = "") -> list[Path]:
    """Run cgroups made by process ``pid`` (default: this one) that still exist.

    ``kind`` names cgroups made ahead of their runs instead, which exist while their
    sandbox is open: ``"ready"`` (prestarted bwrap sandboxes), ``"staged"`` (a warm
    pool's staged inits). Waits first for the removals queued in the background
    (``RunCgroup.remove_soon``).
    """
    flush_removals()
    host = detect_cgroups()
    prefix = f"{kind}-" if kind else ""
    name = re.compile(rf"execgym-{prefix}{pid or os.getpid()}-\d+")
    return [
        p
        for parent in host.parents.values()
        for p in parent.glob("execgym-*")
        if name.fullmatch(p.name)
    ]


def write_jsonl(path: Path, records: Iterable[dict[str, object]]) -> Path:
    """Write one JSON object per line and return ``path``."""
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


ONE_TASK = {
    "task_id": "t/1",
    "prompt": "def f():\n",
    "entry_point": "f",
    "tests": "def check(c):\n    assert c() == 1\n",
}
"""A minimal task whose correct completion is ``    return 1``."""


def run_uid_expected(uid: int, *, in_user_namespace: int = 65534) -> bool:
    """Whether ``uid`` is what a bwrap-tier run's program should be: as root a host uid of
    the runs' own range (``execgym.sandbox._uids``, one per run); as an ordinary user
    ``in_user_namespace`` (65534 in a fresh sandbox, 0 in the warm pool's namespace)."""
    from execgym.sandbox._uids import uid_range

    if os.geteuid() != 0:
        return uid == in_user_namespace
    first, count = uid_range()
    return first <= uid < first + count
