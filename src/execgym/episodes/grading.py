"""The final verdict of an episode: hidden tests on a clean copy of the agent's tree.

The agent's final tree is copied out of its session (regular files only; symlinks
and caches are dropped). In that copy, everything that could change how pytest runs
or what it tests comes from the task, never from the agent:

- the hidden test files are written fresh, over whatever the agent left there;
- every other file under a directory that holds a hidden test file (``tests/``, say;
  not the repo root) is the snapshot's original, and files the agent added there are
  dropped (a ``tests/__init__.py`` or a helper module planted next to the tests);
- ``conftest.py`` and pytest's configuration files (``pytest.ini``, ``tox.ini``,
  ``setup.cfg``, ``pyproject.toml``), wherever they are, are the snapshot's (or
  absent, if it had none).

Then the files of ``fail_to_pass`` and ``pass_to_pass`` run in a fresh sandbox (not the session)
under the pytest harness of :mod:`execgym.judges.pytest_tests`, which records each
test's outcome on its own report channel and notices a replaced report function
(``tampered``, reward 0). A node id that did not run (deleted, renamed, not
collected) counts as failed. The reward comes from the reward specification
(:mod:`execgym.reward`; default ``binary``: 1.0 iff every one passed), with the
fraction passed in the grade either way.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from execgym.episodes.task import RepoTask
from execgym.judges import harness_program
from execgym.judges.base import ErrorDetail, Judgement, Verdict
from execgym.judges.pytest_tests import interpret_pytest_run
from execgym.limits import Limits
from execgym.reward import RewardBreakdown, RewardSpec, evaluate, load_spec
from execgym.sandbox import open_sandbox, python_command
from execgym.sandbox.base import RunRequest, Sandbox
from execgym.tasks.models import Task
from execgym.toolchains import PYTHON_LIBRARIES_DIR

PROTECTED_NAMES = frozenset(
    {"conftest.py", "pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml"}
)
"""File names whose content in the scored tree always comes from the task's snapshot."""

HARNESS_NAME = ".execgym-pytest-harness.py"
"""Where the harness is written in the scoring sandbox (ours wins over any such file)."""

DEFAULT_GRADING_WALL_TIME_S = 120.0
"""Wall-clock seconds the hidden tests may take, unless the task's limits say more."""


@dataclass(frozen=True, slots=True)
class Grade:
    """How an episode's final tree fared on the hidden tests.

    Attributes:
        reward: The reward in [0, 1], or ``None`` when the grading itself failed
            (``sandbox_error``: leave the episode out, never count it as 0).
        fraction: Hidden node ids passed / node ids (0.0 when none ran).
        verdict: ``passed``, ``failed``, ``error``, ``tampered``, ``timeout``... or
            ``sandbox_error``.
        tests: Each hidden node id and its outcome (``passed``, ``failed``, ``error``,
            ``skipped``, ``missing`` when it did not run, ``tampered`` when the run's
            report functions were replaced and no outcome is believed).
        message: Why, for humans.
        wall_time_s: Seconds the grading took.
        breakdown: The reward specification's breakdown (``None`` if not computed).
        peak_memory_bytes: Peak memory of the scoring run, if measured.
    """

    reward: float | None
    fraction: float
    verdict: Verdict
    tests: dict[str, str] = field(default_factory=dict)
    message: str = ""
    wall_time_s: float = 0.0
    breakdown: RewardBreakdown | None = None
    peak_memory_bytes: int | None = None

    def as_info(self) -> dict[str, Any]:
        """The grade as plain JSON for an episode's ``info``."""
        return {
            "reward": self.reward,
            "fraction": self.fraction,
            "verdict": self.verdict.value,
            "masked": self.verdict.is_masked,
            "tests": dict(self.tests),
            "message": self.message,
            "grading_time_s": round(self.wall_time_s, 4),
            "reward_breakdown": self.breakdown.to_json() if self.breakdown else None,
            "grading_peak_memory_bytes": self.peak_memory_bytes,
        }


def clean_tree(
    task: RepoTask, original: dict[str, bytes], final: dict[str, bytes]
) -> dict[str, bytes]:
    """The tree that is scored: the agent's ``final`` tree with the task's parts restored.

    See the module docstring for which files come from ``original`` and the task.
    """
    test_dirs = {PurePosixPath(name).parent for name in task.hidden_tests if "/" in name.strip("/")}

    hidden = {PurePosixPath(name) for name in task.hidden_tests}

    def owned_by_task(name: str) -> bool:
        path = PurePosixPath(name)
        return (
            path.name in PROTECTED_NAMES
            or any(d in path.parents for d in test_dirs)
            or not hidden.isdisjoint(path.parents)  # a directory where a test file goes
        )

    tree = {name: content for name, content in final.items() if not owned_by_task(name)}
    tree.update({name: content for name, content in original.items() if owned_by_task(name)})
    tree.update({name: text.encode("utf-8") for name, text in task.hidden_tests.items()})
    return tree


def changed_code(original: dict[str, bytes], final: dict[str, bytes]) -> str:
    """The agent's new or changed Python files, concatenated (for text-based rewards)."""
    parts = [
        content.decode("utf-8", "replace")
        for name, content in sorted(final.items())
        if name.endswith(".py") and original.get(name) != content
    ]
    return "\n\n".join(parts)


class Grader:
    """Scores final trees; shared by episodes to bound how many score at once.

    Share one between the episodes of one event loop (an :class:`AsyncEnv`'s, or the
    batch runner's); each blocking :class:`Env` runs its own loop, so give each its own.

    Args:
        sandbox: Where the hidden tests run (a fresh bwrap sandbox per grading).
        max_concurrent: Most gradings running at once (each is a pytest process).
    """

    def __init__(self, sandbox: Sandbox | None = None, *, max_concurrent: int = 4) -> None:
        self.sandbox = sandbox or open_sandbox("bwrap")
        self._slots = asyncio.Semaphore(max_concurrent)
        self._runner = harness_program("pytest_runner")

    async def grade(
        self,
        task: RepoTask,
        original: dict[str, bytes],
        final: dict[str, bytes],
        *,
        limits: Limits,
        reward: RewardSpec | None = None,
        sandbox: Sandbox | None = None,
    ) -> Grade:
        """Run the hidden tests on a clean copy of ``final`` and compute the reward.

        ``sandbox``: where they run (default: this grader's; an episode in an
        environment passes one of that environment).
        """
        started = time.monotonic()
        judgement = await self.judge_tree(task, original, final, limits=limits, sandbox=sandbox)
        run = judgement.run
        spec = reward or load_spec("binary")
        synthetic = Task(task_id=task.id, kind="pytest", test_files={HARNESS_NAME: ""})
        breakdown = await evaluate(spec, synthetic, changed_code(original, final), judgement)
        return Grade(
            reward=breakdown.total,
            fraction=judgement.details.get("fraction_passed", 0.0),
            verdict=judgement.verdict,
            tests=judgement.details.get("node_outcomes", {}),
            message=judgement.message,
            wall_time_s=time.monotonic() - started,
            breakdown=breakdown,
            peak_memory_bytes=run.peak_memory_bytes if run is not None else None,
        )

    async def judge_tree(
        self,
        task: RepoTask,
        original: dict[str, bytes],
        final: dict[str, bytes],
        *,
        limits: Limits,
        sandbox: Sandbox | None = None,
    ) -> Judgement:
        """The hidden tests' judgement of a clean copy of ``final`` (no reward).

        Args:
            task: The task (its hidden tests and node ids).
            original: The snapshot's files.
            final: The tree to score (the agent's, or the snapshot with a patch applied).
            limits: The run's limits (at least 120 s of wall time are given).
            sandbox: Where to run (default: this grader's sandbox).

        Returns:
            The judgement; ``details["node_outcomes"]`` holds each hidden node id's
            outcome, ``details["tests"]`` every test that ran.
        """
        tree = clean_tree(task, original, final)
        tree[HARNESS_NAME] = self._runner
        nonce = secrets.token_hex(16)
        # The pytest harness in mode in_process (a repository's tests need its real
        # objects; the tree is a clean copy, the hidden tests fresh). The harness hands
        # each line of part two after the nonce to pytest as an argument. The files are
        # run, not the node ids (a node id in a file that fails to import stops pytest
        # before any test runs), and one broken file must not stop the others.
        files = dict.fromkeys(node.split("::", 1)[0] for node in task.hidden_node_ids)
        first = f"in_process {PYTHON_LIBRARIES_DIR} 0".encode()
        second = "\n".join(
            [nonce, "--continue-on-collection-errors", *task.test_args, *files]
        ).encode()
        job = b"%010d" % len(first) + first + b"%010d" % len(second) + second
        wall = max(limits.wall_time_s, DEFAULT_GRADING_WALL_TIME_S)
        run_limits = limits.merged(wall_time_s=wall, cpu_time_s=max(limits.cpu_time_s, wall))
        async with self._slots:
            run = await (sandbox or self.sandbox).run(
                RunRequest(
                    argv=python_command(HARNESS_NAME),
                    stdin=job,
                    files=tree,
                    limits=run_limits,
                    want_report=True,
                )
            )
        return _judgement(task, interpret_pytest_run(run, nonce))


def _judgement(task: RepoTask, judged: Judgement) -> Judgement:
    """The harness's judgement, re-read against the task's hidden node ids."""
    ran = {
        str(t.get("name")): str(t.get("outcome"))
        for t in judged.details.get("tests", [])
        if isinstance(t, dict)
    }
    ids = task.hidden_node_ids
    tampered = judged.error is not None and judged.error.type == "Tampered"
    # A tampered run's outcomes are the agent's word, not pytest's: none is believed.
    outcomes = {node: "tampered" if tampered else ran.get(node, "missing") for node in ids}
    passed = sum(outcome == "passed" for outcome in outcomes.values())
    details = {
        **judged.details,
        "node_outcomes": outcomes,
        "cases_passed": passed,
        "cases_total": len(ids),
        "fraction_passed": passed / len(ids) if ids else 0.0,
    }
    verdict, message = judged.verdict, judged.message
    if tampered and judged.error is not None:  # tampered: the error says how
        verdict = Verdict.TAMPERED
        details["hack"] = judged.error.message
    elif judged.run is not None and not verdict.is_masked and verdict is not Verdict.TAMPERED:
        failing = [node for node, outcome in outcomes.items() if outcome != "passed"]
        if not failing:
            verdict, message = Verdict.PASSED, f"all {len(ids)} hidden tests passed"
        elif verdict in (Verdict.PASSED, Verdict.FAILED, Verdict.ERROR):
            verdict = Verdict.FAILED if verdict is Verdict.PASSED else verdict
            shown = ", ".join(f"{n} ({outcomes[n]})" for n in failing[:5])
            message = f"{len(failing)} of {len(ids)} hidden tests did not pass: {shown}"
            message += f"; {judged.message}" if judged.message else ""
    error = judged.error or (
        ErrorDetail("HiddenTestsFailed", message) if verdict is not Verdict.PASSED else None
    )
    return Judgement(verdict, judged.run, error, message, details)
