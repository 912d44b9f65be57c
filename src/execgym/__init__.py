"""execgym: turn code written by language models into trustworthy reward signals.

The library API, which the ``execgym`` command line is a thin layer over::

    import asyncio
    from execgym import Scorer, create_sandbox, load_dataset, canonical_rollouts

    tasks = load_dataset("humaneval")
    scorer = Scorer(tasks, create_sandbox("bwrap"))
    results = asyncio.run(scorer.score(canonical_rollouts(tasks)))
    assert all(r.reward == 1.0 for r in results)
"""

from __future__ import annotations

from execgym._version import __version__
from execgym.breakers import BreakerPolicy, Breakers
from execgym.episodes import AsyncEnv, Env, RepoTask, make
from execgym.errors import (
    ConfigError,
    Error,
    SandboxError,
    SandboxSetupFailed,
    SandboxUnavailable,
    TaskError,
    TaskNotFound,
)
from execgym.judges import (
    AssertJudge,
    Builder,
    ErrorDetail,
    FunctionCallJudge,
    Judgement,
    NativeAssertJudge,
    PytestJudge,
    StdioJudge,
    Verdict,
)
from execgym.limits import DEFAULT_LIMITS, Limits, parse_size
from execgym.metrics import Metrics
from execgym.reward import RewardBreakdown, RewardSpec, binary_reward, load_spec
from execgym.sandbox import RunResult, Sandbox, Status, create_sandbox
from execgym.scoring import ScoredRollout, Scorer
from execgym.summary import Summary, pass_at_k, summarize
from execgym.tasks import (
    LineProblem,
    Rollout,
    RolloutLine,
    Task,
    canonical_rollouts,
    load_dataset,
    load_rollouts,
    load_tasks,
)
from execgym.tasks.extract import extract_code

__all__ = [
    "DEFAULT_LIMITS",
    "AssertJudge",
    "AsyncEnv",
    "BreakerPolicy",
    "Breakers",
    "Builder",
    "ConfigError",
    "Env",
    "Error",
    "ErrorDetail",
    "FunctionCallJudge",
    "Judgement",
    "Limits",
    "LineProblem",
    "Metrics",
    "NativeAssertJudge",
    "PytestJudge",
    "RepoTask",
    "RewardBreakdown",
    "RewardSpec",
    "Rollout",
    "RolloutLine",
    "RunResult",
    "Sandbox",
    "SandboxError",
    "SandboxSetupFailed",
    "SandboxUnavailable",
    "ScoredRollout",
    "Scorer",
    "Status",
    "StdioJudge",
    "Summary",
    "Task",
    "TaskError",
    "TaskNotFound",
    "Verdict",
    "__version__",
    "binary_reward",
    "canonical_rollouts",
    "create_sandbox",
    "extract_code",
    "load_dataset",
    "load_rollouts",
    "load_spec",
    "load_tasks",
    "make",
    "parse_size",
    "pass_at_k",
    "summarize",
]
