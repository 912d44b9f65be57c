"""Tasks name their environment; one batch scores tasks of different environments."""

from __future__ import annotations

import platform

import pytest

from execgym.environments import Environment, EnvironmentCache
from execgym.environments.routing import EnvironmentSandboxes
from execgym.judges.base import Verdict
from execgym.sandbox.pool import WarmPoolSandbox
from execgym.scoring import Scorer
from execgym.tasks.models import Rollout, Task

# The first test of a session may import the Debian image (15-40 s; 75 s seen with the
# machine's load at 30) and build it on a new machine (mmdebstrap: 40-80 s more); builds
# copy its 210 MB root.
pytestmark = pytest.mark.timeout(600)

TESTS = "def check(candidate):\n    assert candidate() == {expected!r}\n"
PROBE = (
    "def f():\n"
    "    import os, sys\n"
    "    return [sys.version.split()[0], os.path.exists('/etc/issue'),\n"
    "            open('/opt/replaced').read() if os.path.exists('/opt/replaced') else None]\n"
)


def _task(task_id: str, environment: str | None, expected: list[object]) -> Task:
    return Task(
        task_id=task_id,
        prompt="def f():\n",
        entry_point="f",
        tests=TESTS.format(expected=expected),
        environment=environment,
    )


@pytest.fixture
async def pool():
    async with WarmPoolSandbox() as box:
        yield box


async def test_one_batch_runs_each_task_in_its_own_environment(
    pool: WarmPoolSandbox,
    env_cache: EnvironmentCache,
    debian: Environment,
    debian_top: Environment,
) -> None:
    tasks = {
        "base": _task("base", "debian", ["3.11.2", True, None]),
        "top": _task("top", debian_top.digest[:19], ["3.11.2", False, "layer 3\n"]),
        "host": _task("host", None, [platform.python_version(), False, None]),
    }
    environments = EnvironmentSandboxes(pool, cache=env_cache)
    scorer = Scorer(tasks, pool, environments=environments)
    try:
        body = PROBE.split("\n", 1)[1]
        rollouts = [Rollout(task_id=t, completion=body) for t in ("base", "top", "host") * 2]
        results = await scorer.score(rollouts, workers=3)
        verdicts = {(r.task_id, r.verdict) for r in results}
        assert verdicts == {(t, Verdict.PASSED) for t in tasks}, [r.message for r in results]
        # one warm pool per environment, made once and reused by the second rollout
        assert sorted(environments._by_digest) == sorted([debian.digest, debian_top.digest])
        wrong = await scorer.score([Rollout(task_id="top", completion="    return 0\n")])
        assert wrong[0].verdict is Verdict.FAILED
    finally:
        await scorer.aclose()


async def test_a_task_naming_a_missing_environment_says_how_to_get_it(
    pool: WarmPoolSandbox, env_cache: EnvironmentCache
) -> None:
    environments = EnvironmentSandboxes(pool, cache=env_cache)
    scorer = Scorer({"t": _task("t", "nowhere", [1])}, pool, environments=environments)
    [result] = await scorer.score([Rollout(task_id="t", completion="    return 1\n")])
    assert result.reward is None  # our side could not run it: masked, with the reason
    assert "execgym env import" in result.message
