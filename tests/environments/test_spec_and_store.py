"""A spec is built once and reused; an environment travels through the object store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from execgym.environments import Environment, EnvironmentCache
from execgym.environments.remote import push
from execgym.environments.spec import BuildFailed, EnvironmentSpec, build
from execgym.sandbox.base import Status
from execgym.sandbox.bwrap import BubblewrapSandbox
from execgym.storage import open_store

# The first test of a session may import the Debian image (15-40 s; 75 s seen with the
# machine's load at 30) and build it on a new machine (mmdebstrap: 40-80 s more); builds
# copy its 210 MB root.
pytestmark = pytest.mark.timeout(600)

SPEC = EnvironmentSpec(
    base="debian",
    pip=("iniconfig==2.0.0",),  # from PyPI, during the build only
    setup=("echo built > /opt/marker", "rm /etc/issue"),
    env={"EXECGYM_SPEC": "1"},
)
USES_IT = (
    b"import os, sys\n"
    b"sys.path.append('/opt/execgym/site-packages')\n"
    b"import iniconfig\n"
    b"print(iniconfig.__file__, open('/opt/marker').read().strip(), os.path.exists('/etc/issue'))\n"
)


@pytest.fixture(scope="module")
def built(env_cache: EnvironmentCache, debian: Environment) -> Environment:
    first = build(SPEC, env_cache, name="debian-ini")
    assert first.built
    return first.environment


def test_a_spec_is_built_once_and_reused(
    env_cache: EnvironmentCache, built: Environment, debian_top: Environment
) -> None:
    builds = env_cache.stats()["environments_built"]
    stamp = env_cache.record(built)["built_at"]
    again = build(SPEC, env_cache)
    assert again.built is False
    assert again.environment.digest == built.digest
    assert env_cache.stats()["environments_built"] == builds  # nothing ran again
    assert env_cache.record(again.environment)["built_at"] == stamp
    assert built.config.env["EXECGYM_SPEC"] == "1"
    # the base's layers are shared; the build added one layer of its own
    base = env_cache.get("debian")
    assert built.layers[:-1] == base.layers
    # any change to the spec (or to its base) is another digest: built anew
    changed = SPEC.model_copy(update={"setup": ("echo other > /opt/marker",)})
    assert changed.digest(base) != SPEC.digest(base)
    assert SPEC.digest(debian_top) != SPEC.digest(base)


async def test_the_built_environment_has_its_packages_and_no_network(built: Environment) -> None:
    box = BubblewrapSandbox(environment=built)
    result = await box.run_python(USES_IT)
    assert result.status is Status.OK, result
    assert result.stdout.split()[1:] == [b"built", b"False"]
    assert result.stdout.startswith(b"/opt/execgym/site-packages/iniconfig/")
    offline = await box.run_python(
        b"import socket\nsocket.create_connection(('pypi.org', 443), timeout=3)\n"
    )
    assert offline.status is Status.RUNTIME_ERROR  # the build had network, runs do not


def test_a_failing_build_says_why(env_cache: EnvironmentCache, debian: Environment) -> None:
    with pytest.raises(BuildFailed, match="no-such-command"):
        build(EnvironmentSpec(base="debian", setup=("no-such-command",)), env_cache)


def test_pushed_environment_is_pulled_by_another_worker_process(
    tmp_path: Path, env_cache: EnvironmentCache, built: Environment
) -> None:
    store = open_store(tmp_path / "store")
    pushed = push(store, built, "debian-ini")
    assert pushed.layers == 2
    again = push(store, built, "debian-ini")
    assert again.record.version == pushed.record.version  # same layers, same blobs
    other_cache = tmp_path / "worker-cache"
    env = {
        **os.environ,
        "EXECGYM_STORE": str(tmp_path / "store"),
        "EXECGYM_ENV_CACHE": str(other_cache),
    }
    # A second process with an empty cache: pull, then run a task in the environment.
    pulled = subprocess.run(
        [sys.executable, "-m", "execgym", "env", "pull", "debian-ini", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert pulled.returncode == 0, pulled.stderr
    assert json.loads(pulled.stdout)["digest"] == built.digest
    task = {
        "task_id": "ini",
        "prompt": "def f():\n",
        "entry_point": "f",
        "environment": "debian-ini",
        "tests": "def check(candidate):\n    assert candidate() == 'built'\n",
    }
    rollout = {"task_id": "ini", "completion": "    return open('/opt/marker').read().strip()\n"}
    (tmp_path / "tasks.jsonl").write_text(json.dumps(task) + "\n")
    (tmp_path / "rollouts.jsonl").write_text(json.dumps(rollout) + "\n")
    scored = subprocess.run(
        [
            sys.executable,
            "-m",
            "execgym",
            "score",
            str(tmp_path / "tasks.jsonl"),
            str(tmp_path / "rollouts.jsonl"),
            "-o",
            "-",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert scored.returncode == 0, scored.stderr
    [line] = scored.stdout.splitlines()
    assert json.loads(line)["verdict"] == "passed", line
    assert EnvironmentCache(other_cache).stats()["layers_unpacked"] == 2


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '{"bse": "debian"}',
            ["base: Field required", "'bse' is not a spec field (did you mean 'base'?)"],
        ),
        ('{"base": "debian", "pip": "pytest"}', ["pip: Input should be a JSON list of strings"]),
        ("base: debian", ["is not JSON (Expecting value at line 1 column 1)", '{"base": "debian"']),
    ],
)
def test_a_bad_spec_file_names_the_file_and_what_to_change(
    tmp_path: Path, text: str, expected: list[str]
) -> None:
    path = tmp_path / "spec.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=r"spec\.json is not ") as raised:
        EnvironmentSpec.read(path)
    message = str(raised.value)
    assert message.startswith(f"{path} is not ")
    for part in expected:
        assert part in message
    assert "errors.pydantic.dev" not in message
