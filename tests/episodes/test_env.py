"""Episodes end to end: scripted solutions, budgets, bad actions, and full reclaim."""

from __future__ import annotations

import asyncio
import io
import json
import os
import tarfile
import time
import uuid
from pathlib import Path

import pytest

from execgym.episodes import TOOLS, AsyncEnv, ScriptedAgent, make, parse_repo_task, repo_files
from execgym.episodes.task import examples_dir
from execgym.errors import TaskError
from execgym.limits import MiB
from execgym.reward import load_spec
from tests.conftest import processes_with, run_cgroups

from .conftest import TASK_IDS, call, example, play, play_all, solution


def _openai_shape(action: dict[str, object]) -> dict[str, object]:
    return {"name": action["tool"], "arguments": json.dumps(action.get("arguments", {}))}


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_the_scripted_agent_solves_each_example(task_id: str) -> None:
    agent = ScriptedAgent.for_example(task_id)
    if task_id.endswith("ledger-shared-money"):  # OpenAI's tool-call shape works as well
        agent = ScriptedAgent([_openai_shape(a) for a in agent.actions])
    with make(task_id) as env:
        result = agent.run(env)
    assert result.reward == 1.0, result.info["message"]
    assert result.terminated
    assert not result.truncated
    assert result.fraction == 1.0
    assert set(result.info["tests"].values()) == {"passed"}
    assert all(o["ok"] for o in result.observations[1:]), result.observations
    assert [name for name, _ in result.step_times_s][-1] == "submit"
    if result.info["session_peak_memory_bytes"] is not None:  # where a cgroup measures it
        assert 0 < result.info["session_peak_memory_bytes"] < 512 * MiB
        assert 0 < result.info["grading_peak_memory_bytes"] < 512 * MiB


async def test_submitting_without_changes_gets_zero_and_the_tasks_are_well_posed() -> None:
    results = await play_all([(task_id, []) for task_id in TASK_IDS])
    for task_id, result in zip(TASK_IDS, results, strict=True):
        task = example(task_id)
        assert result.reward == 0.0
        assert result.verdict in ("failed", "error")
        assert result.steps == 1
        # FAIL_TO_PASS fail before the fix and PASS_TO_PASS pass: the split is right.
        assert all(result.info["tests"][node] != "passed" for node in task.fail_to_pass)
        assert all(result.info["tests"][node] == "passed" for node in task.pass_to_pass)
        assert 0 < result.fraction < 1


async def test_the_reward_spec_decides_the_reward() -> None:
    result = await play(TASK_IDS[0], [], reward=load_spec("fraction"))
    assert result.reward == pytest.approx(0.6)
    assert result.fraction == pytest.approx(0.6)
    assert result.info["reward_breakdown"]["components"]["correctness"]["score"] == pytest.approx(
        0.6
    )


async def test_reset_describes_the_task_and_the_tools() -> None:
    async with AsyncEnv(example("example/pager-last-page")) as env:
        observation = await env.reset()
        assert observation["task_id"] == "example/pager-last-page"
        assert "per_page" in observation["problem_statement"]
        assert "pager/core.py" in observation["files"]
        assert observation["tools"] == list(TOOLS)
        assert observation["visible_tests"] == ["tests/test_core.py"]
        observation, reward, terminated, truncated, info = await env.step(
            call("run_command", command="python -c 'import sys; print(sys.version_info[:2])'")
        )
        assert observation["ok"], observation
        assert observation["output"].strip() == "(3, 11)"
        assert (reward, terminated, truncated) == (0.0, False, False)
        assert info["step"] == 1
        assert info["steps_left"] == example("example/pager-last-page").max_steps - 1
        assert 0 < info["time_left_s"] <= example("example/pager-last-page").time_budget_s
        tests, *_ = await env.step(call("run_tests"))
        assert tests["ok"]
        assert "3 passed" in tests["output"]
        assert tests["exit_code"] == 0


BAD_ACTIONS = [
    "ls",
    {"tool": "rm_rf", "arguments": {}},
    {"tool": "read_file", "arguments": {}},
    {"name": "read_file", "arguments": "{not json"},
    call("read_file", path="../../etc/passwd"),
    call("read_file", path="/etc/passwd"),
    call("write_file", path="/tmp/../etc/x", content="x"),
    call("write_file", path=".", content="x"),
    call("run_command", command="ln -s /etc/passwd leak && ln -s / root"),
    call("read_file", path="leak"),
    call("write_file", path="root/tmp/planted", content="x"),
    call("list_dir", path="root"),
    call("read_file", path="missing.py"),
    call("read_file", path="pager"),
    call("list_dir", path="nowhere"),
    call("apply_patch", patch="this is not a diff"),
    call("apply_patch", patch="--- a/pager/core.py\n+++ b/pager/core.py\n@@ -1 +1 @@\n-nope\n+x\n"),
    call("run_command", command="exit 3"),
]


async def test_bad_actions_answer_ok_false_and_the_episode_goes_on() -> None:
    fix = solution(TASK_IDS[0], run_tests=False)
    actions = [*BAD_ACTIONS, call("run_command", command="rm leak root"), *fix]
    task = example(TASK_IDS[0]).model_copy(update={"max_steps": 50})
    result = await play(task, actions)
    bad = result.observations[1 : 1 + len(BAD_ACTIONS)]
    assert [o["ok"] for o in bad].count(True) == 1  # only the ln -s command ran fine
    for observation in bad:
        assert observation["ok"] or observation["tool"] == "run_command" or observation["output"]
    messages = [o["output"] for o in bad]
    assert "JSON object" in messages[0]
    assert "unknown tool 'rm_rf'" in messages[1]
    assert "Field required" in messages[2]
    assert "not valid JSON" in messages[3]
    assert "'..' is not allowed" in messages[4]
    assert "outside the repository" in messages[5]
    assert "leaves /work" in messages[9]  # the symlink is resolved inside the sandbox
    assert "leaves /work" in messages[10]
    assert "cannot read 'missing.py': FileNotFoundError" in messages[12]
    assert "IsADirectoryError" in messages[13]
    assert "patch does not apply" in messages[16]
    assert bad[-1]["exit_code"] == 3
    assert result.reward == 1.0


async def test_long_outputs_are_truncated_and_slow_commands_killed() -> None:
    async with AsyncEnv(example("example/pager-last-page"), max_observation_bytes=1000) as env:
        await env.reset()
        long, *_ = await env.step(call("run_command", command="seq 1 100000"))
        assert long["ok"]
        assert long["truncated"]
        assert "bytes truncated ...]" in long["output"]
        assert long["output"].startswith("1\n2\n")
        assert long["output"].rstrip().endswith("100000")
        assert len(long["output"]) < 1100
        started = time.monotonic()
        slow, *_ = await env.step(call("run_command", command="sleep 30", timeout_s=0.5))
        assert time.monotonic() - started < 5
        assert not slow["ok"]
        assert slow["status"] == "time_limit"
        assert "killed" in slow["output"]
        after, *_ = await env.step(call("run_command", command="echo still here"))
        assert after["output"] == "still here\n"


async def test_the_step_budget_truncates_and_the_tree_is_still_scored() -> None:
    fix = solution(TASK_IDS[0], run_tests=False)
    task = example(TASK_IDS[0]).model_copy(update={"max_steps": len(fix)})
    nothing = example(TASK_IDS[0]).model_copy(update={"max_steps": 2})
    fixed, idle = await asyncio.gather(
        play(task, fix),
        play(nothing, [call("list_dir"), call("list_dir"), call("list_dir")]),
    )
    assert fixed.truncated
    assert not fixed.terminated
    assert fixed.steps == len(fix)
    assert fixed.reward == 1.0
    assert fixed.observations[-1]["episode_end"].startswith("the step budget")
    assert idle.truncated
    assert idle.steps == 2
    assert idle.reward == 0.0


async def test_the_time_budget_bounds_commands_and_ends_the_episode() -> None:
    task = example(TASK_IDS[0]).model_copy(update={"time_budget_s": 1.5})
    async with AsyncEnv(task) as env:
        await env.reset()
        started = time.monotonic()
        observation, reward, terminated, truncated, info = await env.step(
            call("run_command", command="sleep 30", timeout_s=60)
        )
        assert time.monotonic() - started < 10
        assert truncated
        assert not terminated
        assert reward == 0.0
        assert observation["status"] == "time_limit"
        assert "time budget" in observation["episode_end"]
        assert info["verdict"] == "failed"
        again, reward, terminated, *_ = await env.step(call("list_dir"))
        assert not again["ok"]
        assert "episode is over" in again["output"]
        assert terminated


async def test_step_before_reset_is_an_error() -> None:
    async with AsyncEnv(example(TASK_IDS[0])) as env:
        with pytest.raises(TaskError, match="reset"):
            await env.step(call("list_dir"))


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_everything_is_reclaimed_when_an_episode_ends() -> None:
    marker = f"execgym-episode-{uuid.uuid4().hex}"
    temp_before = set(Path("/tmp").glob("execgym-*"))
    async with AsyncEnv(example(TASK_IDS[0])) as env:
        await env.reset()  # warm up imports and caches before counting descriptors
        fds_before = _open_fds()
        await env.reset()  # a second reset replaces the session: the first is reclaimed
        started, *_ = await env.step(
            call("run_command", command=f"(exec -a {marker} sleep 300) > /dev/null 2>&1 &")
        )
        assert started["ok"], started
        assert processes_with(marker)
        *_, info = await env.step(call("submit"))
        assert info["verdict"] == "failed"
        assert processes_with(marker) == []
        assert run_cgroups() == []
        assert env._session is None
    assert _open_fds() <= fds_before
    assert set(Path("/tmp").glob("execgym-*")) == temp_before


async def test_an_agent_that_kills_its_session_gets_zero() -> None:
    result = await play(TASK_IDS[0], [call("run_command", command="kill -9 -1")])
    assert result.truncated
    assert result.reward == 0.0
    assert result.verdict == "error"
    assert "agent died" in result.info["message"]
    assert run_cgroups() == []


async def test_setup_commands_and_tarball_snapshots(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        archive.add(examples_dir() / "repos" / "pager", arcname="pager-0.3.1")
    (tmp_path / "pager.tar.gz").write_bytes(buffer.getvalue())
    fields = example(TASK_IDS[0]).model_dump()
    fields.update(repo=str(tmp_path / "pager.tar.gz"), setup="echo built > BUILT.txt")
    task = parse_repo_task(fields)
    assert "pager/core.py" in repo_files(task)
    broken = parse_repo_task({**fields, "setup": "echo oops >&2; exit 4"})
    result, failure = await asyncio.gather(
        play(task, [call("read_file", path="BUILT.txt"), *solution(TASK_IDS[0], run_tests=False)]),
        play(broken, []),
        return_exceptions=True,
    )
    assert not isinstance(result, BaseException)
    assert result.observations[1]["output"] == "built\n"
    assert result.reward == 1.0
    assert isinstance(failure, TaskError)
    assert "exit code 4" in str(failure)
    assert "oops" in str(failure)


BLANK = " "  # a blank context line of a diff

FUZZY_PATCH = "\n".join(  # off by a few lines, one context line changed: needs fuzz
    [
        "--- a/pager/core.py",
        "+++ b/pager/core.py",
        "@@ -30,7 +30,7 @@",
        "     if per_page <= 0:",
        '         raise ValueError(f"per_page must be positive, got {per_page}")',
        "     if total < 0:",
        '-        raise ValueError(f"total must not be negative, got {total}")',
        '+        raise ValueError(f"total must never be negative, got {total}")',
        "     return total // per_page",
        BLANK,
        BLANK,
        "",
    ]
)

HALF_GOOD_PATCH = "\n".join(  # the first file's hunk applies, the second's does not
    [
        "--- a/pager/core.py",
        "+++ b/pager/core.py",
        "@@ -24,3 +24,3 @@",
        '         raise ValueError(f"total must not be negative, got {total}")',
        "-    return total // per_page",
        "+    return -(-total // per_page)",
        BLANK,
        "--- a/pager/__init__.py",
        "+++ b/pager/__init__.py",
        "@@ -1,2 +1,2 @@",
        "-this line is not there",
        "+neither is this one",
        BLANK,
        "",
    ]
)


async def test_patches_apply_with_fuzz_and_never_halfway() -> None:
    async with AsyncEnv(example(TASK_IDS[0])) as env:
        await env.reset()
        before, *_ = await env.step(call("read_file", path="pager/core.py"))
        half, *_ = await env.step(call("apply_patch", patch=HALF_GOOD_PATCH))
        assert not half["ok"]
        unchanged, *_ = await env.step(call("read_file", path="pager/core.py"))
        assert unchanged["output"] == before["output"]
        fuzzy, *_ = await env.step(call("apply_patch", patch=FUZZY_PATCH))
        assert fuzzy["ok"], fuzzy
        after, *_ = await env.step(call("read_file", path="pager/core.py"))
        assert "must never be negative" in after["output"]
