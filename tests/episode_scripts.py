"""Scripted tool calls for the shipped example tasks: their shipped solutions.

:meth:`execgym.episodes.agent.ScriptedAgent.for_example` holds each example's
solution (``data/episodes/solutions.jsonl``); the tests here replay it through the
HTTP service and the adapters, ending with ``submit``.
"""

from __future__ import annotations

from typing import Any

from execgym.episodes import example_tasks
from execgym.episodes.agent import SUBMIT, ScriptedAgent

PAGER = "example/pager-last-page"
EXAMPLES = sorted(task.id for task in example_tasks())


def solution(task_id: str = PAGER) -> list[dict[str, Any]]:
    """Every tool call of the shipped solution of ``task_id``, ``submit`` last."""
    actions = list(ScriptedAgent.for_example(task_id).actions)
    return actions if actions and actions[-1].get("tool") == "submit" else [*actions, SUBMIT]
