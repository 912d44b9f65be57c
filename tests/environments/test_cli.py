"""``execgym env``: import, list, build, rm and gc on the command line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from execgym.cli import main
from execgym.environments import Environment, EnvironmentCache
from tests.environments.images import layer_tar

# The first test of a session may import the Debian image (15-40 s; 75 s seen with the
# machine's load at 30) and build it on a new machine (mmdebstrap: 40-80 s more); builds
# copy its 210 MB root.
pytestmark = pytest.mark.timeout(600)


def _env(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["env", *args])
    return result.exit_code, result.stdout, result.stderr


def test_import_list_rm_and_gc(
    tmp_path: Path, test_image: Path, env_cache: EnvironmentCache, debian_top: Environment
) -> None:
    cache = str(env_cache.root)
    code, out, err = _env(
        "import", f"{test_image / 'layout'}:top", "--name", "again", "--cache", cache, "--json"
    )
    assert code == 0, err
    assert json.loads(out)["digest"] == debian_top.digest  # the layers were there: no unpack
    code, out, _ = _env("list", "--cache", cache, "--json")
    listed = {e["digest"]: e for e in map(json.loads, out.splitlines())}
    assert "again" in listed[debian_top.digest]["names"]
    code, _, err = _env("import", str(tmp_path / "nothing"), "--cache", cache)
    assert code == 1
    assert "skopeo copy" in err
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"base": "debian", "pipp": ["x"]}))
    code, _, err = _env("build", str(spec), "--cache", cache)
    assert code == 1
    assert "pipp" in err  # the field that is wrong, by name
    # a throwaway image of one small layer: imported, removed, collected
    (tmp_path / "small.tar").write_bytes(layer_tar([("bin/", None), ("bin/tool", b"#!/bin/sh\n")]))
    layout = tmp_path / "small"
    for argv in (
        ["umoci", "init", "--layout", str(layout)],
        ["umoci", "new", "--image", f"{layout}:v1"],
        ["umoci", "raw", "add-layer", "--image", f"{layout}:v1", str(tmp_path / "small.tar")],
    ):
        subprocess.run(argv, check=True, capture_output=True)
    scratch = str(tmp_path / "scratch")
    code, out, err = _env("import", f"{layout}:v1", "--name", "small", "--cache", scratch)
    assert code == 0, err
    code, _, err = _env("rm", "small", "--cache", scratch)
    assert code == 0, err
    code, out, err = _env("gc", "--cache", scratch)
    assert code == 0, err
    assert len(out.split()) == 1  # its one layer, no longer used
    assert EnvironmentCache(scratch).list() == []
    assert not any((tmp_path / "scratch" / "layers").iterdir())
