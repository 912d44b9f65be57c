"""What ``execgym score`` pays before its first rollout (issue 23): loads, pools, programs.

The time itself is measured by ``benchmarks/cli_start.py``; these check what decides
it, independent of the machine's load: which modules a plain batch imports, how many
warm pools it starts, that the packages load their exports on use, and that the
programs derived from execgym's sources are kept between processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from execgym import guest, program_cache
from execgym.cli import main, score_batch
from execgym.cli.score import ScoreOptions
from execgym.lazy_exports import LazyPackage
from execgym.sandbox import RunRequest, RunResult, UnisolatedSandbox
from tests.conftest import ONE_TASK, require, write_jsonl

# Nothing of these serves a batch of Python assert tasks with the default options.
NOT_FOR_A_PLAIN_BATCH = (
    "execgym.broker",
    "execgym.diagnostics",
    "execgym.diagnostics.engine",
    "execgym.environments.cache",
    "execgym.environments.routing",
    "execgym.episodes",
    "execgym.judges.stdio",
    "execgym.judges.function_call",
    "execgym.judges.pytest_tests",
    "execgym.judges.unittest_tests",
    "execgym.judges.assert_native",
    "execgym.judges.diagnosis",  # a result without diagnostics
    "execgym.reward.combine",  # a result without a reward breakdown
    "execgym.tasks.datasets",  # no --dataset: nor the TaskLimits its modules make
    "execgym.ops.metrics",
    "execgym.reward.spec",
    "execgym.reward.evaluate",
    "execgym.server",
    "execgym.storage",
    "fastapi",
    "importlib.metadata",  # pydantic's plugin finder, with every plugin disabled
    "importlib.resources",  # the guest sources are files next to their reader
    "multiprocessing",
    "prometheus_client",
    "ray",
    "redis",
    "tqdm",  # its bar shows on a terminal only
    # the seccomp filter comes from the program cache (warmed first by the test): no
    # pyseccomp, whose import ran `ldconfig -p` twice, nor ctypes
    "pyseccomp",
    "ctypes",
)

_WRAPPER = """
import atexit, gc, json, sys
watched = json.loads(sys.argv[1])
from execgym.sandbox.pool import _control
starts = []
original = _control.ZygoteControl.start
collecting = []
async def counted(self):
    starts.append(1)
    collecting.append(gc.isenabled())
    await original(self)
_control.ZygoteControl.start = counted
from execgym import toolchains
probes = []
found = toolchains._toolchain_paths
def probed():
    probes.append("execgym.cli.score" in sys.modules)
    return found()
toolchains._toolchain_paths = probed
def report():
    heavy = [name for name in watched if name in sys.modules]
    line = {"zygotes": len(starts), "heavy": heavy, "commands_loaded_at_probing": probes[:1]}
    line["collecting"] = [*collecting, gc.isenabled()]
    sys.stderr.write("REPORT " + json.dumps(line) + "\\n")
atexit.register(report)
from execgym.cli import main
sys.argv = ["execgym", *sys.argv[2:]]
main()
"""


def test_a_plain_batch_imports_what_it_uses_and_starts_one_warm_pool(tmp_path: Path) -> None:
    # Issue 23: `execgym score` imported every judge, the diagnostics, the episodes, the
    # environment cache, the reward specifications and prometheus for a batch that used
    # none of them, and the self-test's warm pool was once closed and another started;
    # the zygote's start waited for the toolchains' probes, begun after those imports;
    # the cyclic garbage collector walked the start-up's objects as they were made.
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [ONE_TASK])
    rollouts = write_jsonl(
        tmp_path / "r.jsonl",
        [
            {"task_id": "t/1", "completion": "    return 1\n"},
            {"task_id": "t/1", "completion": "    return 2\n"},
        ],
    )
    warm = "from execgym.sandbox._seccomp import seccomp_program as p; p('none'); p('loopback')"
    subprocess.run([sys.executable, "-c", warm], check=True, timeout=60)  # as any run before
    argv = [sys.executable, "-c", _WRAPPER, json.dumps(NOT_FOR_A_PLAIN_BATCH), "score"]
    argv += [str(tasks), str(rollouts), "-o", str(tmp_path / "out.jsonl"), "--k", "1"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    lines = (tmp_path / "out.jsonl").read_text().splitlines()
    verdicts = [json.loads(line)["verdict"] for line in lines]
    assert verdicts == ["passed", "failed"]
    report = json.loads(done.stderr.split("REPORT ", 1)[1].splitlines()[0])
    # and the toolchains' probes ran while the command's modules were imported, and the
    # garbage collector waited for the start-up's end (on again for the batch)
    assert report == {
        "zygotes": 1,
        "heavy": [],
        "commands_loaded_at_probing": [False],
        "collecting": [False, True],
    }


def _lazy_packages() -> list[str]:
    root = Path(guest.__file__).resolve().parent.parent
    names = []
    for init in sorted(root.rglob("__init__.py")):
        if "lazy_package(" in init.read_text(encoding="utf-8"):
            relative = init.parent.relative_to(root.parent)
            names.append(".".join(relative.parts))
    return names


def test_the_lazy_packages_are_found() -> None:
    assert {"execgym.judges", "execgym.reward", "execgym.tasks"} <= set(_lazy_packages())


@pytest.mark.parametrize("name", _lazy_packages())
def test_each_lazy_export_is_what_its_module_defines(name: str) -> None:
    package = importlib.import_module(name)
    assert isinstance(package, LazyPackage)
    exports = package.__dict__["_lazy_exports"]
    eager = {n for n in package.__all__ if n not in exports}
    assert set(exports) <= set(package.__all__)
    assert all(not isinstance(package.__dict__.get(n), types.ModuleType) for n in eager), eager
    for export, module in exports.items():
        assert getattr(package, export) is getattr(importlib.import_module(module), export)
    assert set(package.__all__) <= set(dir(package))


def test_an_export_named_like_its_module_stays_the_export() -> None:
    # execgym.reward.evaluate is a function in the module execgym/reward/evaluate.py:
    # importing the module first must not leave the package's name bound to the module.
    code = (
        "import types, execgym.reward.evaluate\n"
        "from execgym.reward import evaluate\n"
        "import execgym.reward\n"
        "print(isinstance(evaluate, types.ModuleType), execgym.reward.evaluate is evaluate)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True"]


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("EXECGYM_PROGRAM_CACHE", raising=False)
    program_cache._usable_dir.cache_clear()
    yield tmp_path / "execgym" / "programs"
    program_cache._usable_dir.cache_clear()


def test_a_program_is_made_once_and_read_back_by_its_inputs(cache_home: Path) -> None:
    made: list[bytes] = []

    def make(value: bytes) -> bytes:
        made.append(value)
        return value

    assert program_cache.cached_bytes("t", [b"a"], lambda: make(b"one")) == b"one"
    assert program_cache.cached_bytes("t", [b"a"], lambda: make(b"other")) == b"one"
    assert program_cache.cached_bytes("t", [b"a", b""], lambda: make(b"two")) == b"two"
    assert made == [b"one", b"two"]
    assert cache_home.stat().st_mode & 0o777 == 0o700


def test_a_directory_others_may_write_is_not_used(cache_home: Path) -> None:
    cache_home.mkdir(parents=True)
    cache_home.chmod(0o777)  # anyone could plant an entry: read nothing from it
    calls = []
    for _ in range(2):
        program_cache.cached_bytes("t", [b"a"], lambda: calls.append(1) or b"x")
    assert len(calls) == 2
    assert list(cache_home.iterdir()) == []


def test_compiled_code_survives_a_damaged_entry(cache_home: Path) -> None:
    source = b"def f():\n    return 41 + 1\n"
    code = program_cache.compile_cached(source, "f.py")
    (entry,) = cache_home.iterdir()
    entry.write_bytes(entry.read_bytes()[:10])  # a torn entry: compiled again
    again = program_cache.compile_cached(source, "f.py")
    for compiled in (code, again):
        namespace: dict[str, object] = {}
        exec(compiled, namespace)
        assert namespace["f"]() == 42  # type: ignore[operator]


def test_a_cached_bundle_is_the_bundle(cache_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parts = guest.BUNDLES["assert_runner"]
    built = guest._join("assert_runner", parts, [guest.source(part) for part in parts])
    guest.bundle.cache_clear()
    try:
        assert guest.bundle("assert_runner") == built  # made, and written
        guest.bundle.cache_clear()
        monkeypatch.setattr(guest, "_join", lambda *args: pytest.fail("the entry was not read"))
        assert guest.bundle("assert_runner") == built
    finally:
        guest.bundle.cache_clear()


def test_the_cached_seccomp_filter_is_the_built_one(cache_home: Path) -> None:
    # Issue 23: every command imported pyseccomp (two `ldconfig -p` runs) and built the
    # filter; now a process finds it in the program cache, by its inputs.
    require(importlib.util.find_spec("pyseccomp") is not None, "pyseccomp (pip install pyseccomp)")
    from execgym.sandbox import _seccomp

    for network in ("none", "loopback"):
        built = _seccomp.build_seccomp_program(network)
        _seccomp.seccomp_program.cache_clear()
        assert _seccomp.seccomp_program(network) == built  # made and written
        _seccomp.seccomp_program.cache_clear()
        assert _seccomp.seccomp_program(network) == built  # read back
    _seccomp.seccomp_program.cache_clear()
    probe = (
        "import sys\n"
        "from execgym.sandbox._seccomp import seccomp_program as program\n"
        "sys.stdout.write(program('none').hex() + ' ' + str('pyseccomp' in sys.modules))\n"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(cache_home.parent.parent)}
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == [_seccomp.build_seccomp_program("none").hex(), "False"]
    # a damaged entry is not loaded into a run: the filter is built again
    for entry in cache_home.iterdir():
        if entry.name.startswith("seccomp-") and not entry.name.startswith("seccomp-library"):
            entry.write_bytes(entry.read_bytes()[:-4])
    _seccomp.seccomp_program.cache_clear()
    try:
        assert _seccomp.seccomp_program("none") == _seccomp.build_seccomp_program("none")
    finally:
        _seccomp.seccomp_program.cache_clear()


class _SelfTestWatched(UnisolatedSandbox):
    """Runs programs unisolated, and sees whether the self-test runs beside a rollout.

    The self-test's run is told apart by its known-good test (``candidate() == 1``;
    the batch's task says ``c() == 1``). It waits, at most ``wait_s``, for a rollout
    of the batch to have finished; ``broken`` then makes it fail as a sandbox that
    cannot start the harness would.
    """

    def __init__(self, *, broken: bool = False, wait_s: float = 5.0) -> None:
        super().__init__(allow_root=True)
        self.broken = broken
        self.wait_s = wait_s
        self.rollouts_done = 0
        self.self_test_saw: int | None = None
        self.self_test_began = threading.Event()
        self._done: asyncio.Event | None = None

    async def run(self, request: RunRequest) -> RunResult:
        self._done = self._done or asyncio.Event()
        if b"candidate() == 1" not in (request.stdin or b""):
            result = await super().run(request)
            self.rollouts_done += 1
            self._done.set()
            return result
        self.self_test_began.set()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.wait_s):
                await self._done.wait()
        await asyncio.sleep(0.1)  # the rollout's result reaches the results file's writer
        self.self_test_saw = self.rollouts_done
        if self.broken:  # the harness never starts: no report, the self-test fails
            request = dataclasses.replace(request, python_source=b"raise SystemExit(3)\n")
        return await super().run(request)


def _score_with(
    sandbox: _SelfTestWatched, tmp_path: Path, **patches: object
) -> tuple[int, str, Path]:
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [ONE_TASK])
    rollouts = write_jsonl(
        tmp_path / "r.jsonl", [{"task_id": "t/1", "completion": "    return 1\n"}]
    )
    out = tmp_path / "out.jsonl"
    args = ["score", str(tasks), str(rollouts), "-o", str(out), "--k", "1"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ScoreOptions, "sandbox", lambda self: sandbox)
        for name, value in patches.items():
            patch.setattr(score_batch, name, value)
        done = CliRunner().invoke(main, [*args, "--isolation", "none", "--allow-root"])
    return done.exit_code, done.stdout + done.stderr, out


def test_the_self_test_runs_beside_the_first_rollouts(tmp_path: Path) -> None:
    # Issue 23: the batch's first rollout waited for the self-test's run to end (about
    # a tenth of the command's start); the old code lets the self-test wait out wait_s.
    sandbox = _SelfTestWatched()
    frozen = gc.get_freeze_count()
    code, output, out = _score_with(sandbox, tmp_path)
    assert code == 0, output
    assert sandbox.self_test_saw == 1
    # a caller's process (this one) gets its collector back, and nothing frozen
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen
    assert [json.loads(line)["verdict"] for line in out.read_text().splitlines()] == ["passed"]


def test_the_self_test_runs_while_the_tasks_are_read(tmp_path: Path) -> None:
    # It needs neither the tasks nor their judges: it starts once the zygote is up
    # (the old code started it after loading; reading the tasks waits up to 5 s for it).
    sandbox = _SelfTestWatched()
    began: list[bool] = []
    real = score_batch.load_inputs

    def load_inputs(*args: Any) -> Any:
        began.append(sandbox.self_test_began.wait(5))
        return real(*args)

    code, output, _ = _score_with(sandbox, tmp_path, load_inputs=load_inputs)
    assert code == 0, output
    assert began == [True]
    assert sandbox.self_test_saw == 1


def test_results_scored_beside_a_failing_self_test_are_never_written(tmp_path: Path) -> None:
    # The self-test's purpose: a broken sandbox stops the batch before any result
    # counts. The rollout finished before the self-test failed: its result was held,
    # and is dropped with the batch; the results file is not even created.
    sandbox = _SelfTestWatched(broken=True)
    code, output, out = _score_with(sandbox, tmp_path)
    assert sandbox.self_test_saw == 1
    assert code == 1, output
    assert "failed its self-test" in output
    assert "results were written" not in output
    assert not out.exists()


_PLUGINS = """
import os, sys
from execgym.cli.score import without_pydantic_plugins
without_pydantic_plugins()
import pydantic

class M(pydantic.BaseModel):
    x: int

assert M(x=1).x == 1
loader = sys.modules["pydantic.plugin._loader"]
print("importlib.metadata" in sys.modules, list(loader.get_plugins()))
print(loader.PYDANTIC_ENTRY_POINT_GROUP, "importlib.metadata" in sys.modules)
"""


@pytest.mark.parametrize(
    ("setting", "first"), [("__all__", "False []"), ("", "True []"), ("logfire", "True []")]
)
def test_pydantic_plugins_are_not_searched_for_only_when_all_are_disabled(
    setting: str, first: str
) -> None:
    # PYDANTIC_DISABLE_PLUGINS=__all__ (what `execgym score` sets unless told): the
    # finder and the importlib.metadata it imports stay out; any other name asked of
    # the stand-in loads the real finder. Any other setting leaves pydantic as it is.
    env = {**os.environ, "PYDANTIC_DISABLE_PLUGINS": setting}
    done = subprocess.run(
        [sys.executable, "-c", _PLUGINS], capture_output=True, text=True, env=env, check=True
    )
    assert done.stdout.splitlines() == [first, "pydantic True"]


_TORN = """
import os, sys
class Torn:
    def __del__(self, write=os.write):
        write(2, b"TORN DOWN\\n")
keep = Torn()
from execgym.cli import main
sys.argv = ["execgym", *sys.argv[1:]]
main()
"""


def test_score_leaves_without_taking_the_interpreter_apart(tmp_path: Path) -> None:
    # After its exit hooks, the interpreter freed every module's objects one by one
    # (10-20 ms of CPU for memory the kernel takes back whole): `execgym score` ends
    # the process after the hooks and the streams' flush; its status is kept.
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [ONE_TASK])
    rollouts = write_jsonl(
        tmp_path / "r.jsonl", [{"task_id": "t/1", "completion": "    return 1\n"}]
    )
    out = tmp_path / "out.jsonl"
    argv = [sys.executable, "-c", _TORN, "score", str(tasks), str(rollouts), "-o", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "pass@1: 1.0000" in done.stdout
    assert json.loads(out.read_text())["verdict"] == "passed"
    assert "TORN DOWN" not in done.stderr
    missing = subprocess.run(
        [*argv[:5], str(tmp_path / "none.jsonl"), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert missing.returncode == 2
    assert "does not exist" in missing.stderr
