"""The hostile corpus (``tests/sandbox/hostile/*.py``) against every real backend.

Each file in ``hostile/`` is data, not a test: one stdlib-only program that attacks the
sandbox, opening with a header of ``# key: value`` comment lines that declares what must
happen to it::

    # status: time_limit                  a Status value (required unless `raises`)
    # limit_hit: wall_time_s              the RunResult.limit_hit; absent (or none) means None
    # exit_code: 7                        optional
    # limits: {"wall_time_s": 1}          JSON overrides of BASE_LIMITS; sizes may be "128MiB"
    # attack: fork bomb that ...          one line, for humans (required)
    # stdout_has: b"..."                  repeatable: a bytes literal that stdout contains
    # stderr_has: b"..."                  repeatable: the same for stderr
    # stdout_re: rb"^...$"                repeatable: a regex (MULTILINE) that stdout matches
    # output_lacks: b"..."                repeatable: bytes in neither stdout nor stderr
    # wall_time_below_s: 1.0              the run must end sooner than its wall limit
    # files: {"../{marker}": "x"}         extra files for run(files=); {marker} is filled in
    # raises: TaskError                   run() must raise this (from execgym.errors) and
    #                                     start nothing
    # xfail: reason                       a known hole: xfail(strict=True) on every backend
    # see: test_field_cases.py::test_...  a test under tests/ covering the same case
    # note: text                          why a backend's expectation differs (for humans)
    #   more text                         a line starting with "#   " continues the last

Any key can be given for one backend only as ``key[gvisor]: value``; for that backend it
replaces every plain line of that key. Two more tags describe the host rather than the
backend, and win over both: ``key[rlimits]`` where no cgroup is usable (limits are
rlimits only, e.g. an ordinary user on a cgroup-v1 host) and ``key[userns]`` for bwrap
run by an ordinary user (the sandbox has its own user namespace). A header that does
not parse, names a limit out of the small range, or refers to a missing test fails
collection.

One parametrized test runs every program on every backend in :data:`BACKENDS` with a
unique marker as ``argv[1]`` (so its processes can be found by command line) and checks:
(1) the declared status, ``limit_hit`` and exit code; (2) the program's own evidence
(``stdout_has``...; a program prints ``ESCAPED ...`` when an attack works, which always
fails); (3) that the host is unchanged: no process with the marker, no new child of the
test process (zombies included), no run cgroup, no new mount in ``/proc/self/mountinfo``,
no new file of the run in ``/tmp``, ``/dev/shm`` or the checkout, no file named after
the marker in host directories, a uid-65534 sentinel process and the test's parent
alive, no connection on a TCP server (127.0.0.1 and the host's address) or an abstract
Unix socket the test listens on, and no host secret (a fake API key set with
monkeypatch, ``/etc/shadow``, the checkout) in the output. A last test checks that
after the whole module nothing of ours is left.

New files in ``/tmp``, ``/dev/shm`` and the checkout count as the run's when their name
holds the marker or starts with ``execgym``, or they belong to the sandbox uid (65534, or
as root a uid of the runs' range, ``execgym.sandbox._uids``):
other people's unrelated files appearing meanwhile on a shared machine are not failures.

Already covered elsewhere, and not repeated here: file-name escapes with ``../``, ``/``,
NUL and backslash (``test_sandbox.py::test_file_names_cannot_escape_the_work_dir``); the
classic ``while True: os.fork()`` and fd exhaustion through the judge (``test_bc17_*``);
timeouts of sh/node/setsid'ed children (``test_bc10_*``); zombies over 20 timeouts
(``test_bc12_*``); the memory hog's neighbour (``test_bc15_*``); output floods racing
the cap (``test_bc19b_*``); host services, egress and the metadata address
(``test_bc26_*``); secrets and other samples' files (``test_bc28_*``); ``exit``/kill of
the harness through the judge (``test_bc29_*``); the syscall numbers in the seccomp
filter called with zero arguments (``test_sandbox.py::test_bwrap_seccomp_*``).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import os
import re
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import execgym.errors
from execgym.limits import Limits, MiB, parse_size
from execgym.sandbox import RunResult, Status, WarmPoolSandbox
from execgym.sandbox._cgroup import RunCgroup, detect_cgroups
from execgym.sandbox._uids import uid_range
from execgym.sandbox.bwrap import SANDBOX_UID
from tests.conftest import descendants, processes_with, run_cgroups

BACKENDS = ["bwrap", "prestarted", "pool", "gvisor"]
"""Real backends the corpus runs on: a new one is one more name here, given a
``<name>_sandbox`` fixture in tests/conftest.py or this module (which skips, or fails
in CI, where the backend cannot run) and, where it differs, ``key[<name>]`` lines in
the headers. ``pool`` is the warm pool (:class:`WarmPoolSandbox`): its runs are Python
only, so each program runs as ``run_python`` of a few lines that exec the program's
file with the marker as ``sys.argv[1]`` (see :func:`pool_script`)."""

HOST_TAGS = ("rlimits", "userns")
"""Header tags for the host a backend runs on (see the module's docstring)."""


def host_tags(backend: str) -> tuple[str, ...]:
    """The :data:`HOST_TAGS` that hold for ``backend`` on this host, strongest first."""
    tags = []
    if detect_cgroups().version is None:
        tags.append("rlimits")
    if backend in ("bwrap", "prestarted", "pool") and os.geteuid() != 0:
        tags.append("userns")
    return tuple(tags)


HOSTILE_DIR = Path(__file__).with_name("hostile")
CHECKOUT = Path(__file__).resolve().parents[2]
RUN_TAG = f"execgym-hostile-{secrets.token_hex(4)}"
"""Prefix of every marker of this module's runs: nothing carrying it may outlive them."""

BASE_LIMITS = Limits(
    wall_time_s=2,
    cpu_time_s=10,
    memory_bytes=256 * MiB,
    max_processes=32,
    max_output_bytes=1 * MiB,
    max_file_bytes=16 * MiB,
    disk_bytes=16 * MiB,
    max_open_files=64,
)
"""Small limits every program runs with, before its header's overrides."""

_KEYS = {
    "status",
    "limit_hit",
    "exit_code",
    "limits",
    "attack",
    "stdout_has",
    "stderr_has",
    "stdout_re",
    "output_lacks",
    "wall_time_below_s",
    "files",
    "raises",
    "xfail",
    "see",
    "note",
}
_REPEATABLE = {"stdout_has", "stderr_has", "stdout_re", "output_lacks"}
_HEADER_LINE = re.compile(r"^# (?P<key>[a-z_]+)(?:\[(?P<backend>[a-z]+)\])?: (?P<value>.*)$")
_CONTINUATION = "#   "
_WALL_GRACE_S = 0.5  # a run ends at most this long after its wall budget
_ELAPSED_GRACE_S = 2.0  # and run() returns at most this long after it (start-up, reaping)


# --- the corpus ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Expectation:
    """What must happen to one hostile program on one backend."""

    attack: str
    limits: Limits
    status: Status | None = None
    raises: type[Exception] | None = None
    limit_hit: str | None = None
    exit_code: int | None = None
    stdout_has: tuple[bytes, ...] = ()
    stderr_has: tuple[bytes, ...] = ()
    stdout_re: tuple[bytes, ...] = ()
    output_lacks: tuple[bytes, ...] = ()
    wall_time_below_s: float | None = None
    files: dict[str, str] = field(default_factory=dict)
    xfail: str | None = None


@dataclass(frozen=True)
class Hostile:
    """One program of the corpus and its parsed header."""

    path: Path
    header: dict[tuple[str, str | None], list[str]]

    @property
    def name(self) -> str:
        return self.path.stem

    def expect(self, backend: str, host: tuple[str, ...] = ()) -> Expectation:
        """The expectation on ``backend`` (``key[backend]`` lines override plain ones,
        and ``key[tag]`` lines for the ``host`` tags, in order, override both)."""

        def values(key: str) -> list[str]:
            for tag in (*host, backend, None):
                if found := self.header.get((key, tag)):
                    return found
            return []

        def one(key: str) -> str | None:
            found = values(key)
            return found[0] if found else None

        def literals(key: str) -> tuple[bytes, ...]:
            parsed = tuple(ast.literal_eval(value) for value in values(key))
            if not all(isinstance(value, bytes) for value in parsed):
                raise ValueError(f"{self.path.name}: {key} takes bytes literals (b'...')")
            return parsed

        overrides = json.loads(one("limits") or "{}")
        for key, value in overrides.items():
            if key.endswith("_bytes") and isinstance(value, str):
                overrides[key] = parse_size(value)
        raises = one("raises")
        status = one("status")
        exit_code, below = one("exit_code"), one("wall_time_below_s")
        return Expectation(
            attack=one("attack") or "",
            limits=BASE_LIMITS.merged(**overrides),
            status=Status(status) if status else None,
            raises=getattr(execgym.errors, raises) if raises else None,
            limit_hit=None if one("limit_hit") in (None, "none") else one("limit_hit"),
            exit_code=int(exit_code) if exit_code is not None else None,
            stdout_has=literals("stdout_has"),
            stderr_has=literals("stderr_has"),
            stdout_re=literals("stdout_re"),
            output_lacks=literals("output_lacks"),
            wall_time_below_s=float(below) if below is not None else None,
            files=json.loads(one("files") or "{}"),
            xfail=one("xfail"),
        )


def _parse_header(path: Path) -> dict[tuple[str, str | None], list[str]]:
    header: dict[tuple[str, str | None], list[str]] = {}
    last: list[str] | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        if line.startswith(_CONTINUATION) and last is not None:
            last[-1] += " " + line.removeprefix(_CONTINUATION).strip()
            continue
        match = _HEADER_LINE.match(line)
        if match is None or match["key"] not in _KEYS:
            raise ValueError(f"{path.name}: not a header line: {line!r}")
        key = (match["key"], match["backend"])
        if key in header and match["key"] not in _REPEATABLE:
            raise ValueError(f"{path.name}: {match['key']} is given twice")
        last = header.setdefault(key, [])
        last.append(match["value"])
    return header


def _check_header(hostile: Hostile) -> None:
    """Fail collection on a header that breaks the corpus's rules."""
    for reference in hostile.header.get(("see", None), []):
        test_file, _, test_name = reference.partition("::")
        target = Path(__file__).parents[1] / test_file
        if not target.is_file() or f"def {test_name}(" not in target.read_text():
            raise ValueError(f"{hostile.path.name}: see: {reference} does not exist")
    backends = {backend for _, backend in hostile.header if backend}
    if unknown := backends - set(BACKENDS) - set(HOST_TAGS):
        raise ValueError(f"{hostile.path.name}: unknown backend(s) {sorted(unknown)}")
    for backend, host in [("", ()), *((b, ()) for b in BACKENDS), ("bwrap", HOST_TAGS)]:
        expect = hostile.expect(backend, host)
        limits = expect.limits
        problems = [
            "no attack line" if not expect.attack else "",
            "needs exactly one of status and raises"
            if (expect.status is None) == (expect.raises is None)
            else "",
            f"wall_time_s {limits.wall_time_s} is not 1-5 s"
            if not 1 <= limits.wall_time_s <= 5
            else "",
            f"memory_bytes {limits.memory_bytes} is not 128-256 MiB"
            if not 128 * MiB <= limits.memory_bytes <= 256 * MiB
            else "",
            "max_processes above 64" if limits.max_processes > 64 else "",
            "max_output_bytes above 1 MiB" if limits.max_output_bytes > MiB else "",
        ]
        if any(problems):
            raise ValueError(f"{hostile.path.name}: {[p for p in problems if p]}")


def load_corpus() -> list[Hostile]:
    """Every program in ``hostile/``, with its header parsed and checked."""
    corpus = [Hostile(path, _parse_header(path)) for path in sorted(HOSTILE_DIR.glob("*.py"))]
    for hostile in corpus:
        _check_header(hostile)
    return corpus


CORPUS = load_corpus()


# --- host state ----------------------------------------------------------------------------


def _listing(directory: Path) -> set[str]:
    try:
        return {entry.name for entry in os.scandir(directory)}
    except OSError:
        return set()


def _checkout_files() -> set[str]:
    skip = {".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache"}
    found = set()
    for root, dirs, files in os.walk(CHECKOUT):
        dirs[:] = [d for d in dirs if d not in skip]
        found.update(os.path.join(root, name) for name in [*dirs, *files])
    return found


def _mounts() -> set[tuple[str, ...]]:
    """Mounts as (root, mount point, fs type, source): ids may be reused, these may not."""
    mounts = set()
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        for line in handle:
            left, _, right = line.partition(" - ")
            parts, rparts = left.split(), right.split()
            mounts.add((parts[3], parts[4], rparts[0], rparts[1]))
    return mounts


def _holds(directory: Path, marker: str, names: set[str], budget: int = 2000) -> bool:
    """Whether a directory tree holds an entry named after the marker or a corpus file."""
    for _, dirs, files in os.walk(directory):
        for name in [*dirs, *files]:
            budget -= 1
            if marker in name or name in names or budget <= 0:
                return budget > 0
    return False


def _is_ours(path: Path, marker: str, names: set[str]) -> bool:
    """Whether a new host path comes from the run(s) ``marker`` names.

    Its name holds the marker, it belongs to the sandbox's uid, or it is an ``execgym*``
    temp dir holding a corpus program or the marker (a backend's leaked work dir). Other
    ``execgym*`` dirs are other people's concurrent runs on a shared machine.
    """
    try:
        owner = path.lstat().st_uid
    except OSError:
        return False  # gone again
    first, count = uid_range()  # as root each run is a uid of this range
    if marker in path.name or owner == SANDBOX_UID or first <= owner < first + count:
        return True
    return path.name.startswith("execgym") and path.is_dir() and _holds(path, marker, names)


def _lingering(paths: set[Path], marker: str, names: set[str], wait_s: float) -> list[str]:
    """The paths of ours still there after ``wait_s`` (a leak does not go away)."""
    deadline = time.monotonic() + wait_s
    while True:
        left = sorted(str(p) for p in paths if _is_ours(p, marker, names))
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


@dataclass(frozen=True)
class HostState:
    """What the host looks like, to compare before and after a run."""

    children: dict[int, str]
    mounts: set[tuple[str, ...]]
    tmp: set[str]
    shm: set[str]
    checkout: set[str]

    @classmethod
    def capture(cls) -> HostState:
        return cls(
            children=descendants(os.getpid()),
            mounts=_mounts(),
            tmp=_listing(Path("/tmp")),
            shm=_listing(Path("/dev/shm")),
            checkout=_checkout_files(),
        )

    def changes(
        self, tag: str, names: set[str], *, wait_s: float = 0.0, children_wait_s: float = 0.0
    ) -> list[str]:
        """What is new on the host since this snapshot and belongs to the run(s).

        Args:
            tag: The marker of one run, or the prefix of every marker of the module.
            names: File names of the corpus programs run (to recognise their work dirs).
            wait_s: How long a new file of ours may take to go away.
            children_wait_s: How long a new process of the test's tree may take to go
                away (a warm-pool run is reported while its PID 1, every other process
                of it already gone, is still tearing its namespaces down).
        """
        problems = []
        if leaked := processes_with(tag):
            problems.append(f"processes with {tag} alive: {leaked}")
        deadline = time.monotonic() + children_wait_s
        while True:
            children = descendants(os.getpid())
            new = {pid: s for pid, s in children.items() if pid not in self.children}
            if not new or time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        if new:
            problems.append(f"new child processes of the test (Z = zombie): {new}")
        if cgroups := run_cgroups():
            problems.append(f"run cgroups left: {cgroups}")
        if mounts := _mounts() - self.mounts:
            problems.append(f"new mounts: {sorted(mounts)}")
        new_files = {Path("/tmp", n) for n in _listing(Path("/tmp")) - self.tmp}
        new_files |= {Path("/dev/shm", n) for n in _listing(Path("/dev/shm")) - self.shm}
        new_files |= {Path(p) for p in _checkout_files() - self.checkout}
        if left := _lingering(new_files, tag, names, wait_s):
            problems.append(f"new files of the run on the host: {left}")
        return problems


def _host_files_named(marker: str) -> list[str]:
    """Files named after the marker in the host directories a program aims at."""
    places = ["/", "/usr", "/usr/bin", "/usr/lib", "/etc", "/root", "/tmp", "/var/tmp"]
    places += ["/dev", "/dev/shm", str(CHECKOUT), sys.base_prefix, os.path.dirname(sys.executable)]
    return sorted(str(p) for place in places for p in Path(place).glob(f"*{marker}*"))


def _host_secrets() -> list[bytes]:
    """Host data no run may ever print (besides the per-test fake API key)."""
    found = []
    with contextlib.suppress(OSError, IndexError):
        found.append(Path("/etc/shadow").read_text().splitlines()[0].encode())
    for line in (CHECKOUT / "pyproject.toml").read_text().splitlines():
        if line.startswith("description"):
            found.append(line.encode())
    return found


def _host_address() -> str | None:
    """This host's address on its default route, if any (no packet is sent)."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))
        address = probe.getsockname()[0]
    except OSError:
        return None
    finally:
        probe.close()
    return None if address.startswith("127.") else address


# --- fixtures ------------------------------------------------------------------------------


@pytest.fixture
async def pool_sandbox(bwrap_sandbox: object) -> AsyncIterator[WarmPoolSandbox]:
    """A warm pool whose zygote is running before the test's host snapshot, with no inits
    staged ahead (they would be new processes of the test's tree after the run)."""
    pool = WarmPoolSandbox()
    pool._stager.target = 0
    async with pool:
        yield pool


def pool_script(name: str, marker: str) -> bytes:
    """A pooled run's script that runs the corpus file ``name`` as ``name marker`` would."""
    return (
        "import sys\n"
        f"sys.argv = [{name!r}, {marker!r}]\n"
        f"with open({name!r}, 'rb') as handle:\n"
        f"    code = compile(handle.read(), {name!r}, 'exec')\n"
        f"exec(code, {{'__name__': '__main__', '__file__': {name!r}}})\n"
    ).encode()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> tuple[str, object]:
    """``(name, sandbox)`` for each real backend, from its ``<name>_sandbox`` fixture."""
    return request.param, request.getfixturevalue(f"{request.param}_sandbox")


@dataclass
class HostTargets:
    """Things on the host a program may attack, and what happened to them."""

    port: int
    abstract_socket: str
    sentinel: subprocess.Popen[bytes]
    connections: list[str] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        return {
            "HOSTILE_PORT": str(self.port),
            "HOSTILE_HOST_ADDRESS": _host_address() or "",
            "HOSTILE_ABSTRACT_SOCKET": self.abstract_socket,
            "HOSTILE_TEST_PID": str(os.getpid()),
            "HOSTILE_PARENT_PID": str(os.getppid()),
            "HOSTILE_SENTINEL_PID": str(self.sentinel.pid),
            "HOSTILE_CHECKOUT": str(CHECKOUT),
        }

    def problems(self) -> list[str]:
        found = []
        if self.connections:
            found.append(f"host servers were reached: {self.connections}")
        if self.sentinel.poll() is not None:
            found.append(f"the uid {SANDBOX_UID} sentinel died: {self.sentinel.returncode}")
        try:
            os.kill(os.getppid(), 0)
        except OSError:
            found.append("the test process's parent is gone")
        return found


@pytest.fixture
async def host_targets() -> AsyncIterator[HostTargets]:
    """A TCP server (all addresses), an abstract Unix socket, and a sleeping process that
    runs as the sandbox's own uid (the first thing a sandbox escape could kill)."""
    connections: list[str] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(repr(writer.get_extra_info("peername") or "unix"))
        writer.close()

    tcp = await asyncio.start_server(accept, "0.0.0.0", 0)
    abstract = f"execgym-hostile-{secrets.token_hex(8)}"
    unix = await asyncio.start_unix_server(accept, "\0" + abstract)
    as_sandbox_uid = (
        {"user": SANDBOX_UID, "group": SANDBOX_UID, "extra_groups": []} if os.geteuid() == 0 else {}
    )
    sentinel = subprocess.Popen(
        ["execgym-sentinel", "300"],
        executable="/usr/bin/sleep",
        start_new_session=True,
        **as_sandbox_uid,
    )
    try:
        yield HostTargets(tcp.sockets[0].getsockname()[1], abstract, sentinel, connections)
    finally:
        sentinel.kill()
        sentinel.wait()
        for server in (tcp, unix):
            server.close()
            await server.wait_closed()


@pytest.fixture(scope="module", autouse=True)
def module_baseline() -> HostState:
    """The host before this module's first run, for the last test."""
    return HostState.capture()


# --- the attacks ---------------------------------------------------------------------------


def _describe(result: RunResult | None) -> str:
    if result is None:
        return ""
    return (
        f"\nstatus={result.status.value} limit_hit={result.limit_hit} "
        f"exit_code={result.exit_code} signal={result.signal} "
        f"wall_time_s={result.wall_time_s:.2f} cpu_time_s={result.cpu_time_s:.2f} "
        f"message={result.message!r}\nstdout={result.stdout[:3000]!r}"
        f"\nstderr={result.stderr[-3000:]!r}"
    )


class DeclaredHole(AssertionError):
    """The program's run broke its header: the one kind of failure an ``xfail`` line excuses."""


def _check_result(
    result: RunResult, expect: Expectation, elapsed_s: float, expect_isolation: str
) -> list[str]:
    """What is wrong with a run's status, evidence and timing, per the header."""
    problems = []
    if result.isolation != expect_isolation:
        problems.append(f"isolation {result.isolation!r}, expected {expect_isolation!r}")
    got = (result.status, result.limit_hit)
    if got != (expect.status, expect.limit_hit):
        problems.append(
            f"(status, limit_hit) = {got}, expected {(expect.status, expect.limit_hit)}"
        )
    if expect.exit_code is not None and result.exit_code != expect.exit_code:
        problems.append(f"exit_code {result.exit_code}, expected {expect.exit_code}")
    output = result.stdout + result.stderr
    for line in output.splitlines():
        if line.startswith(b"ESCAPED"):
            problems.append(f"the program says: {line.decode(errors='replace')}")
    problems += [
        f"stdout lacks {want!r}" for want in expect.stdout_has if want not in result.stdout
    ]
    problems += [
        f"stderr lacks {want!r}" for want in expect.stderr_has if want not in result.stderr
    ]
    problems += [
        f"stdout does not match {pattern!r}"
        for pattern in expect.stdout_re
        if not re.search(pattern, result.stdout, re.MULTILINE)
    ]
    problems += [f"output holds {bad!r}" for bad in expect.output_lacks if bad in output]
    wall = expect.limits.wall_time_s
    below = expect.wall_time_below_s or wall + _WALL_GRACE_S
    if result.wall_time_s > below:
        problems.append(f"wall_time_s {result.wall_time_s:.2f} > {below}")
    if elapsed_s > wall + _ELAPSED_GRACE_S:
        problems.append(f"run() took {elapsed_s:.2f} s for a {wall} s limit")
    if result.limit_hit == "max_output_bytes":
        caps = {
            "stdout": (result.stdout_truncated, len(result.stdout)),
            "stderr": (result.stderr_truncated, len(result.stderr)),
        }
        cap = expect.limits.max_output_bytes
        if (True, cap) not in caps.values():
            problems.append(f"no stream was cut at {cap} bytes: (truncated, kept) = {caps}")
        problems += [f"{name} kept {n} > {cap} bytes" for name, (_, n) in caps.items() if n > cap]
    return problems


@pytest.mark.parametrize("hostile", CORPUS, ids=[hostile.name for hostile in CORPUS])
async def test_hostile_program_is_contained(
    hostile: Hostile,
    backend: tuple[str, object],
    host_targets: HostTargets,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    """The program ends as its header says, shows no escape, and leaves the host as it was."""
    name, sandbox = backend
    expect = hostile.expect(name, host_tags(name))
    if expect.xfail:  # only the declared kind of failure; a leak on the host still fails
        request.applymarker(
            pytest.mark.xfail(strict=True, reason=expect.xfail, raises=DeclaredHole)
        )
    marker = f"{RUN_TAG}-{hostile.name}-{name}"
    fake_key = f"sk-execgym-fake-{secrets.token_hex(12)}"
    monkeypatch.setenv("OPENAI_API_KEY", fake_key)
    monkeypatch.setenv("GITHUB_TOKEN", fake_key)
    files = {hostile.path.name: hostile.path.read_bytes()}
    files.update({k.replace("{marker}", marker): v.encode() for k, v in expect.files.items()})
    argv = [os.path.realpath(sys.executable), "-I", "-S", hostile.path.name, marker]
    if name == "prestarted":  # the run must take a sandbox set up before the snapshot
        assert await sandbox.prestart(expect.limits)

    def launch() -> Awaitable[RunResult]:
        if name == "pool":
            script = pool_script(hostile.path.name, marker)
            return sandbox.run_python(
                script, files=files, limits=expect.limits, env=host_targets.env()
            )
        return sandbox.run_argv(argv, files=files, limits=expect.limits, env=host_targets.env())

    before = HostState.capture()
    result: RunResult | None = None
    program_problems: list[str] = []  # what the program did or how its run ended
    host_problems: list[str] = []  # what reached the host: never excused by an xfail
    if expect.raises is not None:
        started: list[str] = []
        real_popen, real_create = subprocess.Popen, RunCgroup.create

        class SpyPopen(real_popen):
            def __init__(self, args, *rest, **options) -> None:
                started.append(f"process {args!r}")
                super().__init__(args, *rest, **options)

        def spy_create(limits: Limits) -> RunCgroup | None:
            started.append("cgroup")
            return real_create(limits)

        with monkeypatch.context() as patch:
            patch.setattr(subprocess, "Popen", SpyPopen)
            patch.setattr(RunCgroup, "create", spy_create)
            with pytest.raises(expect.raises):
                await launch()
        if started:
            host_problems.append(f"started before raising: {started}")
    else:
        begun = time.monotonic()
        result = await launch()
        elapsed = time.monotonic() - begun
        if name == "prestarted":
            assert "prestarted" in result.enforcement.get("start", ""), result.enforcement
        program_problems += _check_result(
            result, expect, elapsed, "bwrap" if name in ("prestarted", "pool") else name
        )
        output = result.stdout + result.stderr
        host_problems += [
            f"host secret in the output: {secret!r}"
            for secret in [fake_key.encode(), *_host_secrets()]
            if secret in output
        ]
    if name == "prestarted":  # what it prestarts next is not the run's: reclaim it first
        await sandbox.aclose()
    host_problems += host_targets.problems()
    host_problems += before.changes(
        marker, {hostile.path.name}, children_wait_s=2.0 if name == "pool" else 0.0
    )
    if named := _host_files_named(marker):
        host_problems.append(f"files named after the run on the host: {named}")
    title = f"{hostile.name} on {name} ({expect.attack}):\n"
    assert not host_problems, (
        title + "\n".join(host_problems + program_problems) + (_describe(result))
    )
    if program_problems:
        raise DeclaredHole(title + "\n".join(program_problems) + _describe(result))


def test_nothing_of_the_corpus_is_left(module_baseline: HostState) -> None:
    """After every run of the module: no process, mount, cgroup or execgym-* temp dir."""
    names = {hostile.path.name for hostile in CORPUS}
    problems = module_baseline.changes(RUN_TAG, names, wait_s=3.0)
    if named := _host_files_named(RUN_TAG):
        problems.append(f"files named after a run on the host: {named}")
    assert not problems, "\n".join(problems)
