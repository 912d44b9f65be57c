"""Observations: the structured, size-capped answers the agent gets to each action.

Every observation is a plain JSON dict with at least ``tool``, ``ok`` and ``output``
(text), plus ``exit_code`` and ``truncated`` for commands and tests. Long text keeps
its head and its tail around a marker that says how much was cut::

    first lines...
    [... 12345 bytes truncated ...]
    ...last lines
"""

from __future__ import annotations

from typing import Any

from execgym.sandbox.base import RunResult, Status

DEFAULT_MAX_OBSERVATION_BYTES = 16 * 1024
"""Bytes of text an observation carries at most (head + tail), by default."""


def truncate(data: bytes | str, max_bytes: int) -> tuple[str, bool]:
    """``data`` as text of at most about ``max_bytes`` bytes, head and tail kept.

    Returns:
        ``(text, truncated)``; undecodable bytes are replaced.
    """
    raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
    if len(raw) <= max_bytes:
        return raw.decode("utf-8", "replace"), False
    head = max_bytes // 2
    tail = max_bytes - head
    cut = len(raw) - head - tail
    text = (
        raw[:head].decode("utf-8", "ignore")
        + f"\n[... {cut} bytes truncated ...]\n"
        + raw[-tail:].decode("utf-8", "ignore")
    )
    return text, True


def failure(tool: str, message: str) -> dict[str, Any]:
    """The observation of an action that could not be carried out."""
    return {"tool": tool, "ok": False, "output": message, "error": message}


def of_run(tool: str, run: RunResult, max_bytes: int) -> dict[str, Any]:
    """The observation of a command: its output (stdout, then stderr), exit code, status.

    ``ok`` is true when the command exited with code 0.
    """
    streams = run.stdout
    if run.stderr:
        streams += (b"\n" if streams and not streams.endswith(b"\n") else b"") + run.stderr
    text, cut = truncate(streams, max_bytes)
    status = run.status
    if status is Status.TIME_LIMIT:
        text += f"\n[the command was killed: {run.message or 'time limit'}]"
    elif status not in (Status.OK, Status.RUNTIME_ERROR):
        text += f"\n[{status.value}: {run.message}]" if run.message else f"\n[{status.value}]"
    return {
        "tool": tool,
        "ok": status is Status.OK and run.exit_code == 0,
        "output": text,
        "exit_code": run.exit_code,
        "status": status.value,
        "truncated": cut or run.stdout_truncated or run.stderr_truncated,
        "wall_time_s": round(run.wall_time_s, 4),
    }
