"""execgym: turn code written by language models into trustworthy reward signals.

The library API, which the ``execgym`` command line is a thin layer over::

    import asyncio
    from execgym import Scorer, open_sandbox, load_dataset, canonical_rollouts

    tasks = load_dataset("humaneval")
    scorer = Scorer(tasks, open_sandbox("bwrap"))
    results = asyncio.run(scorer.score(canonical_rollouts(tasks)))
    assert all(r.reward == 1.0 for r in results)
"""

from __future__ import annotations

import typing as _typing

from execgym._version import __version__

if _typing.TYPE_CHECKING:
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
    from execgym.ops.breakers import BreakerPolicy, Breakers
    from execgym.ops.metrics import Metrics
    from execgym.reward import RewardBreakdown, RewardSpec, binary_reward, load_spec
    from execgym.sandbox import RunRequest, RunResult, Sandbox, Status, create_sandbox, open_sandbox
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

# Imported on first use (PEP 562), so that ``import execgym.cli`` and the sandbox's
# helpers do not pay for every subsystem: ``from execgym import Scorer`` still works.
_LAZY = {
    "BreakerPolicy": "execgym.ops.breakers",
    "Breakers": "execgym.ops.breakers",
    "AsyncEnv": "execgym.episodes",
    "Env": "execgym.episodes",
    "RepoTask": "execgym.episodes",
    "make": "execgym.episodes",
    "ConfigError": "execgym.errors",
    "Error": "execgym.errors",
    "SandboxError": "execgym.errors",
    "SandboxSetupFailed": "execgym.errors",
    "SandboxUnavailable": "execgym.errors",
    "TaskError": "execgym.errors",
    "TaskNotFound": "execgym.errors",
    "AssertJudge": "execgym.judges",
    "Builder": "execgym.judges",
    "ErrorDetail": "execgym.judges",
    "FunctionCallJudge": "execgym.judges",
    "Judgement": "execgym.judges",
    "NativeAssertJudge": "execgym.judges",
    "PytestJudge": "execgym.judges",
    "StdioJudge": "execgym.judges",
    "Verdict": "execgym.judges",
    "DEFAULT_LIMITS": "execgym.limits",
    "Limits": "execgym.limits",
    "parse_size": "execgym.limits",
    "Metrics": "execgym.ops.metrics",
    "RewardBreakdown": "execgym.reward",
    "RewardSpec": "execgym.reward",
    "binary_reward": "execgym.reward",
    "load_spec": "execgym.reward",
    "RunRequest": "execgym.sandbox",
    "RunResult": "execgym.sandbox",
    "Sandbox": "execgym.sandbox",
    "Status": "execgym.sandbox",
    "create_sandbox": "execgym.sandbox",
    "open_sandbox": "execgym.sandbox",
    "ScoredRollout": "execgym.scoring",
    "Scorer": "execgym.scoring",
    "Summary": "execgym.summary",
    "pass_at_k": "execgym.summary",
    "summarize": "execgym.summary",
    "LineProblem": "execgym.tasks",
    "Rollout": "execgym.tasks",
    "RolloutLine": "execgym.tasks",
    "Task": "execgym.tasks",
    "canonical_rollouts": "execgym.tasks",
    "load_dataset": "execgym.tasks",
    "load_rollouts": "execgym.tasks",
    "load_tasks": "execgym.tasks",
    "extract_code": "execgym.tasks.extract",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'execgym' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


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
    "RunRequest",
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
    "open_sandbox",
    "parse_size",
    "pass_at_k",
    "summarize",
]
