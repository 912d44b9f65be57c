"""The README's and docs/swe.md's SWE-bench steps, run as written: import, build, score."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from execgym.environments import Environment, EnvironmentCache

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "swe"
BLOCK = re.compile(r"```sh\n(.*?)```", re.S)


@pytest.mark.timeout(900)
def test_the_documented_steps_score_a_real_instance(
    test_image: Path, env_cache: EnvironmentCache, debian: Environment, tmp_path: Path
) -> None:
    blocks = BLOCK.findall((ROOT / "docs" / "swe.md").read_text())
    assert len(blocks) == 2, blocks
    # the README's step-by-step is these very commands: running them runs both pages'
    readme = [b for b in BLOCK.findall((ROOT / "README.md").read_text()) if "execgym env" in b]
    assert readme == ["".join(blocks)], readme
    (tmp_path / "image").symlink_to(test_image / "layout")
    (tmp_path / "snapshots").mkdir()
    row = next(
        json.loads(line)
        for line in (DATA / "instances.jsonl").read_text().splitlines()
        if '"pytoolz/toolz"' in line
    )
    (tmp_path / row["snapshot"]).symlink_to(DATA / row["snapshot"])
    instance = {**row, "environment": "swe-py"}
    (tmp_path / "instances.jsonl").write_text(json.dumps(instance) + "\n")
    predictions = [
        {"instance_id": row["instance_id"], "model_patch": p, "model_name_or_path": m}
        for m, p in (("gold", row["patch"]), ("empty", ""))
    ]
    (tmp_path / "predictions.jsonl").write_text("".join(json.dumps(p) + "\n" for p in predictions))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "execgym").write_text(f'#!/bin/sh\nexec {sys.executable} -m execgym "$@"\n')
    (bin_dir / "execgym").chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "EXECGYM_ENV_CACHE": str(env_cache.root),
    }
    for block in blocks:
        done = subprocess.run(
            ["sh", "-ec", block], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr
    assert "swe-py" in {name for e in env_cache.list() for name in e.names}
    results = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    got = {r["rollout_id"]: (r["verdict"], r["reward"]) for r in results}
    assert got == {
        f"{row['instance_id']}#gold": ("passed", 1.0),
        f"{row['instance_id']}#empty": ("failed", 0.0),
    }
