"""Scripted tool calls for the shipped example task ``example/pager-last-page``.

The fix is written from the file the agent reads (as a model would), so the script
follows the shipped repository.
"""

from __future__ import annotations

from typing import Any

from execgym.episodes import example_tasks, repo_files

PAGER = "example/pager-last-page"
BUG, FIX = "return total // per_page", "return -(-total // per_page)"


def pager_fix() -> dict[str, Any]:
    """The ``write_file`` action that fixes the pager (rounds the page count up)."""
    task = next(t for t in example_tasks() if t.id == PAGER)
    source = repo_files(task)["pager/core.py"].decode()
    assert BUG in source, "the shipped pager no longer has its bug; update this script"
    return {
        "tool": "write_file",
        "arguments": {"path": "pager/core.py", "content": source.replace(BUG, FIX)},
    }


def pager_solution() -> list[dict[str, Any]]:
    """Read, fix, test, submit: every tool call of a solving agent."""
    return [
        {"tool": "list_dir", "arguments": {"path": "."}},
        {"tool": "read_file", "arguments": {"path": "pager/core.py"}},
        pager_fix(),
        {"tool": "run_tests", "arguments": {}},
        {"tool": "submit", "arguments": {}},
    ]
