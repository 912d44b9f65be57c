"""What ``execgym score`` pays before its first rollout (issue 23): loads, pools, programs.

The time itself is measured by ``benchmarks/cli_start.py``; these check what decides
it, independent of the machine's load: which modules a plain batch imports, how many
warm pools it starts, that the packages load their exports on use, and that the
programs derived from execgym's sources are kept between processes.
"""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from execgym import guest, program_cache
from execgym.lazy_exports import LazyPackage
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
    "execgym.ops.metrics",
    "execgym.reward.spec",
    "execgym.reward.evaluate",
    "execgym.server",
    "execgym.storage",
    "fastapi",
    "multiprocessing",
    "prometheus_client",
    "ray",
    "redis",
)

_WRAPPER = """
import atexit, json, sys
watched = json.loads(sys.argv[1])
from execgym.sandbox.pool import _control
starts = []
original = _control.ZygoteControl.start
async def counted(self):
    starts.append(1)
    await original(self)
_control.ZygoteControl.start = counted
def report():
    heavy = [name for name in watched if name in sys.modules]
    sys.stderr.write("REPORT " + json.dumps({"zygotes": len(starts), "heavy": heavy}) + "\\n")
atexit.register(report)
from execgym.cli import main
sys.argv = ["execgym", *sys.argv[2:]]
main()
"""


def test_a_plain_batch_imports_what_it_uses_and_starts_one_warm_pool(tmp_path: Path) -> None:
    # Issue 23: `execgym score` imported every judge, the diagnostics, the episodes, the
    # environment cache, the reward specifications and prometheus for a batch that used
    # none of them, and the self-test's warm pool was once closed and another started.
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [ONE_TASK])
    rollouts = write_jsonl(
        tmp_path / "r.jsonl",
        [
            {"task_id": "t/1", "completion": "    return 1\n"},
            {"task_id": "t/1", "completion": "    return 2\n"},
        ],
    )
    argv = [sys.executable, "-c", _WRAPPER, json.dumps(NOT_FOR_A_PLAIN_BATCH), "score"]
    argv += [str(tasks), str(rollouts), "-o", str(tmp_path / "out.jsonl"), "--k", "1"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    lines = (tmp_path / "out.jsonl").read_text().splitlines()
    verdicts = [json.loads(line)["verdict"] for line in lines]
    assert verdicts == ["passed", "failed"]
    report = json.loads(done.stderr.split("REPORT ", 1)[1].splitlines()[0])
    assert report == {"zygotes": 1, "heavy": []}


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
