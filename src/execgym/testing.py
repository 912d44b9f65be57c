"""Test doubles shipped with execgym, for users' tests and ours: no privileges needed.

>>> import asyncio
>>> from execgym.testing import FakeSandbox, fake_result
>>> box = FakeSandbox([fake_result()])
>>> asyncio.run(box.run_argv(["anything"])).status.value
'ok'
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from execgym.judges.languages import KNOWN_GOOD
from execgym.limits import Limits
from execgym.sandbox.base import BaseSandbox, RunRequest, RunResult, Status


def fake_result(status: Status = Status.OK, **fields: Any) -> RunResult:
    """A :class:`RunResult` with harmless defaults; ``fields`` override any attribute."""
    base = RunResult(
        status=status,
        exit_code=0 if status is Status.OK else None,
        signal=None,
        stdout=b"",
        stderr=b"",
        stdout_truncated=False,
        stderr_truncated=False,
        wall_time_s=0.01,
        cpu_time_s=0.01,
        peak_memory_bytes=1 << 20,
        isolation="fake",
    )
    return replace(base, **fields)


@dataclass(frozen=True, slots=True)
class FakeCall:
    """One call made to a :class:`FakeSandbox`, for assertions."""

    argv: Sequence[str]
    stdin: bytes
    files: Mapping[str, bytes]
    limits: Limits
    want_report: bool


@dataclass
class FakeSandbox(BaseSandbox):
    """A sandbox that runs nothing and returns scripted results, in order.

    Args:
        results: The results to return, one per call; or a function of the call. When a
            list runs out, the last result repeats.
        keep_calls: Record every call in ``calls``; turn off for long runs, whose
            memory would otherwise grow with each call.

    Attributes:
        calls: Every call made, in order (only the last one unless ``keep_calls``).
    """

    results: Sequence[RunResult] | Callable[[FakeCall], RunResult]
    name: str = "fake"
    calls: list[FakeCall] = field(default_factory=list)
    keep_calls: bool = True
    _served: int = 0

    async def run(self, request: RunRequest) -> RunResult:
        """Record the call and return the next scripted result.

        A Python request is recorded as ``python runner.py`` with the script in its
        files.
        """
        request = request.as_script_file(["python", "runner.py"])
        call = FakeCall(
            list(request.argv),
            request.stdin,
            dict(request.files),
            request.limits,
            request.want_report,
        )
        if not self.keep_calls:
            self.calls.clear()
        self.calls.append(call)
        if callable(self.results):
            return self.results(call)
        scripted: Iterable[RunResult] = self.results
        ordered = list(scripted)
        self._served += 1
        return ordered[min(self._served, len(ordered)) - 1]


SUM_OF_TWO = KNOWN_GOOD
"""A program per language that reads two integers and prints their sum (known good)."""


def harness_pass(call: FakeCall) -> RunResult:
    """A :class:`FakeSandbox` script: the assert harness's report that every test passed.

    Reads the run's nonce from the job on stdin, as the real harness does, so
    :class:`~execgym.AssertJudge` gives ``passed`` without anything running.
    """
    from execgym.judges.assert_tests import job_nonce
    from execgym.judges.base import START_MARKER

    nonce = job_nonce(call.stdin)
    return fake_result(report=START_MARKER + nonce + b'\n{"verdict": "passed"}\n')


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A real ``redis-server`` on a free port with AOF on, for tests and benchmarks.

    Never a service left running by someone else: each instance starts its own,
    keeps its files in ``directory``, and can be killed and started again on the same
    port and files (to test a restart). ``appendfsync`` is ``everysec`` (Redis's
    default); set it to ``"always"`` before :meth:`start` for every write on disk
    before it is answered (nothing lost even on SIGKILL). Set ``persistence`` to
    ``False`` for no AOF and no snapshot at all: a restart then starts empty, as a
    cache-style Redis (or a failover to an empty replica) does.

    Args:
        directory: Where its AOF files and ``redis.log`` go.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.appendfsync = "everysec"
        self.persistence = True
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start it and wait until it answers ``PING``.

        Raises:
            RuntimeError: with its log, if it does not start within 10 s.
        """
        argv = [
            "redis-server",
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.directory),
            "--appendonly", "yes" if self.persistence else "no",
            "--appendfsync", self.appendfsync,
            "--save", "",
            "--protected-mode", "no",
        ]  # fmt: skip
        with (self.directory / "redis.log").open("ab") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(64).startswith(b"+PONG"):
                        return
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        raise RuntimeError(
            f"redis-server did not start: {(self.directory / 'redis.log').read_text()}"
        )

    def kill(self) -> None:
        """SIGKILL it (no save on exit) and wait for it."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()


class FakeClock:
    """A clock for :mod:`execgym.storage` that only moves when told to.

    It starts at the real time (so objects written now are "now" to it too) and
    :meth:`advance` ages everything without sleeping.

    >>> from datetime import timedelta
    >>> clock = FakeClock()
    >>> start = clock()
    >>> clock.advance(timedelta(days=8))
    >>> (clock() - start).days
    8
    """

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start if start is not None else datetime.now(UTC)

    def __call__(self) -> datetime:
        """Now, as this clock has it."""
        return self.now

    def advance(self, by: timedelta) -> None:
        """Move the clock forward by ``by``."""
        self.now += by


class MotoS3Server:
    """An S3-compatible server (moto's server mode) on a free port, for tests.

    Needs ``moto[server]`` (in the ``storage`` and ``dev`` extras). One server can
    serve many tests: give each its own bucket (:meth:`create_bucket`).

    Attributes:
        key: The access key id it accepts (moto accepts any).
        secret: The secret access key.
    """

    key = "testing"
    secret = "testing"  # noqa: S105 (moto's fake credentials, for a local test server)

    def __init__(self) -> None:
        self.port = free_port()
        self._server: Any = None

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def storage_options(self) -> dict[str, Any]:
        """Endpoint and credentials for :func:`execgym.storage.open_store`."""
        return {"endpoint_url": self.endpoint_url, "key": self.key, "secret": self.secret}

    def start(self) -> None:
        """Start serving (in a thread of this process)."""
        import logging

        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()

    def stop(self) -> None:
        """Stop serving; its buckets are gone."""
        if self._server is not None:
            self._server.stop()
            self._server = None

    def create_bucket(self, name: str) -> None:
        """Create the bucket ``name``."""
        import s3fs

        fs = s3fs.S3FileSystem(
            key=self.key,
            secret=self.secret,
            client_kwargs={"endpoint_url": self.endpoint_url},
            skip_instance_cache=True,
        )
        fs.mkdir(name)


@dataclass(frozen=True)
class FakeRepoTask:
    """A repository task for :class:`FakeEpisodeEnv`: files, and the files that solve it.

    Attributes:
        task_id: Its id.
        statement: The problem statement (the first observation).
        files: ``{path: text}`` of the starting tree.
        solution: ``{path: text}`` the final tree must hold for reward 1.
        max_steps: Step budget; the step that spends it is ``truncated``.
    """

    task_id: str = "fake/fix-add"
    statement: str = "add() subtracts; make it add."
    files: Mapping[str, str] = field(
        default_factory=lambda: {"calc.py": "def add(a, b):\n    return a - b\n"}
    )
    solution: Mapping[str, str] = field(
        default_factory=lambda: {"calc.py": "def add(a, b):\n    return a + b\n"}
    )
    max_steps: int = 20


FAKE_TOOLS = (
    "run_command",
    "read_file",
    "write_file",
    "list_dir",
    "apply_patch",
    "run_tests",
    "submit",
)
"""The tool names :class:`FakeEpisodeEnv` answers (those of :mod:`execgym.episodes`)."""


class FakeEpisodeEnv:
    """An in-memory episode (the ``EpisodeEnv`` interface): no sandbox, files in a dict.

    ``write_file``/``read_file``/``list_dir`` act on the dict; ``run_command`` and
    ``apply_patch`` only echo; ``run_tests`` says whether the tree matches the solution;
    ``submit`` ends the episode with reward 1 if it does, else 0. Actions may be
    ``{"tool", "arguments": {...}}`` or OpenAI's ``{"name", "arguments": "<json>"}``.

    Attributes:
        closed: Whether ``aclose`` was called.
        actions: Every action stepped, in order.
    """

    def __init__(self, task: FakeRepoTask, *, step_delay_s: float = 0.0) -> None:
        self.task = task
        self.files = dict(task.files)
        self.closed = False
        self.steps = 0
        self.actions: list[Mapping[str, Any]] = []
        self._delay_s = step_delay_s

    async def reset(self) -> dict[str, Any]:
        """The problem statement and the file list."""
        return {"problem_statement": self.task.statement, "files": sorted(self.files)}

    async def step(
        self, action: Mapping[str, Any]
    ) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """One tool call; see the class docstring."""
        import asyncio
        import json

        if self.closed:
            raise RuntimeError("step on a closed FakeEpisodeEnv")
        if self._delay_s:
            await asyncio.sleep(self._delay_s)
        self.actions.append(action)
        self.steps += 1
        name = action.get("tool") or action.get("name")
        arguments = action.get("arguments") or {}
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                error = {
                    "tool": name,
                    "ok": False,
                    "output": f"arguments are not JSON: {arguments[:80]!r}",
                }
                return error, 0.0, False, False, {}
        solved = all(self.files.get(p) == text for p, text in self.task.solution.items())
        reward, terminated, observation = 0.0, False, self._tool(name, arguments, solved)
        if name == "submit":
            reward, terminated = (1.0 if solved else 0.0), True
        truncated = not terminated and self.steps >= self.task.max_steps
        return observation, reward, terminated, truncated, {"tool": name, "step": self.steps}

    def _tool(self, name: Any, arguments: Mapping[str, Any], solved: bool) -> dict[str, Any]:
        ok, text = self._carry_out(name, arguments, solved)
        return {"tool": name, "ok": ok, "output": text}

    def _carry_out(self, name: Any, arguments: Mapping[str, Any], solved: bool) -> tuple[bool, str]:
        if name == "write_file":
            self.files[str(arguments["path"])] = str(arguments["content"])
            return True, f"wrote {arguments['path']}"
        if name == "read_file":
            path = str(arguments.get("path"))
            return (
                (True, self.files[path]) if path in self.files else (False, f"no such file: {path}")
            )
        if name == "list_dir":
            return True, "\n".join(sorted(self.files))
        if name in ("run_command", "apply_patch"):
            return True, f"{name}: nothing runs in a FakeEpisodeEnv"
        if name == "run_tests":
            return solved, "1 passed" if solved else "1 failed"
        if name == "submit":
            return True, "submitted"
        return False, f"unknown tool {name!r}; tools: {', '.join(FAKE_TOOLS)}"

    async def aclose(self) -> None:
        """Mark the episode closed (idempotent)."""
        self.closed = True


class FakeTaskCatalog:
    """A :class:`~execgym.episodes.protocol.TaskCatalog` of :class:`FakeRepoTask`."""

    def __init__(self, *tasks: FakeRepoTask) -> None:
        self.tasks = {task.task_id: task for task in (tasks or (FakeRepoTask(),))}

    def ids(self) -> list[str]:
        """The ids of its tasks."""
        return sorted(self.tasks)

    def get(self, task_id: str) -> FakeRepoTask:
        """The task, or :class:`~execgym.errors.TaskNotFound`."""
        from execgym.errors import TaskNotFound

        if task_id not in self.tasks:
            raise TaskNotFound(f"unknown task_id {task_id!r}; known: {sorted(self.tasks)}")
        return self.tasks[task_id]

    def parse(self, record: Mapping[str, Any]) -> FakeRepoTask:
        """A :class:`FakeRepoTask` from JSON, or :class:`~execgym.errors.TaskError`."""
        from execgym.errors import TaskError

        try:
            return FakeRepoTask(**record)
        except TypeError as error:
            raise TaskError(f"not a valid inline task: {error}") from error
