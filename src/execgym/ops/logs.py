"""Logging set-up: text for people, one JSON object per line for machines, on stderr.

Every component logs through the standard library (``logging.getLogger(__name__)``);
:func:`configure` is called once, at the edge (``execgym`` on the command line), with
the level and format from ``--log-level`` / ``--log-format``, else the environment
(``EXECGYM_LOG_LEVEL``, ``EXECGYM_LOG_FORMAT``), else ``warning`` and ``text``. The
human output of the commands (summaries, tables) stays on stdout; logs go to stderr.

In JSON, each line has ``ts`` (ISO 8601, UTC), ``level``, ``logger``, ``message``, and
whichever of the fields of :data:`FIELDS` the record carries, from ``extra={...}`` or
from :func:`log_context` (a context variable, so each asyncio task has its own)::

    {"ts": "2026-12-01T13:30:40.120Z", "level": "info", "logger": "execgym.worker",
     "message": "job_done", "job_id": "b1/3", "task_id": "HumanEval/3",
     "rollout_id": "HumanEval/3#3", "worker": "node-1", "verdict": "passed"}

Submissions (code) are never logged, only their ids.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import json
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import IO

from execgym.errors import ConfigError

FIELDS = ("job_id", "batch_id", "task_id", "rollout_id", "task_type", "worker", "verdict")
"""The structured fields a record may carry; others in ``extra`` are kept too."""

LEVELS = ("debug", "info", "warning", "error", "critical")
FORMATS = ("text", "json")
TEXT_FORMAT = "execgym: %(levelname)s: %(message)s"

_context: contextvars.ContextVar[Mapping[str, object]] = contextvars.ContextVar(
    "execgym_log_context", default=MappingProxyType({})
)
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "color_message"}


@contextlib.contextmanager
def log_context(**fields: object) -> Iterator[None]:
    """Add ``fields`` to every record logged inside the ``with`` (in this task)."""
    token = _context.set({**_context.get(), **fields})
    try:
        yield
    finally:
        _context.reset(token)


class JsonFormatter(logging.Formatter):
    """One JSON object per record; exceptions go in ``exc_info`` as text."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        created = datetime.datetime.fromtimestamp(record.created, tz=datetime.UTC)
        data: dict[str, object] = {
            "ts": created.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        data.update(_context.get())
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                data[key] = value
        if record.exc_info:
            data["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str, ensure_ascii=False)


def settings_from(
    level: str | None, fmt: str | None, environ: Mapping[str, str] | None = None
) -> tuple[str, str]:
    """The level and format to use: the arguments, else ``EXECGYM_LOG_*``, else defaults.

    Raises:
        ConfigError: for an unknown level or format, naming the choices.
    """
    environ = os.environ if environ is None else environ
    level = (level or environ.get("EXECGYM_LOG_LEVEL") or "warning").strip().lower()
    fmt = (fmt or environ.get("EXECGYM_LOG_FORMAT") or "text").strip().lower()
    if level not in LEVELS:
        raise ConfigError(f"unknown log level {level!r}: choose one of {', '.join(LEVELS)}")
    if fmt not in FORMATS:
        raise ConfigError(f"unknown log format {fmt!r}: choose one of {', '.join(FORMATS)}")
    return level, fmt


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time (a test may have replaced it)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> IO[str]:
        return sys.stderr

    @stream.setter
    def stream(self, value: IO[str]) -> None:
        """Ignored: this handler always writes to the current ``sys.stderr``."""


def configure(
    level: str = "warning", fmt: str = "text", stream: IO[str] | None = None, *, force: bool = True
) -> None:
    """Send execgym's (and every library's) logs to ``stream`` (stderr) at ``level``.

    Replaces the handler an earlier call installed (so calling it twice does not log
    twice) and leaves other handlers (pytest's, an embedding application's) alone.

    Args:
        level: One of :data:`LEVELS`.
        fmt: ``text`` or ``json``.
        stream: Where to write; ``None`` is ``sys.stderr`` as it is at each write.
        force: Install the handler even when the root logger has handlers of someone
            else's; ``False`` behaves like :func:`logging.basicConfig` (then nothing
            changes).

    Raises:
        ConfigError: for an unknown level or format.
    """
    level, fmt = settings_from(level, fmt, {})
    root = logging.getLogger()
    ours = [old for old in root.handlers if old.get_name() == "execgym"]
    if not force and len(ours) < len(root.handlers):
        return
    handler = logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    handler.set_name("execgym")
    handler.setLevel(level.upper())  # records of libraries' own loggers too (uvicorn's)
    for old in ours:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


def json_configured() -> bool:
    """Whether :func:`configure` installed a JSON handler on the root logger."""
    return any(
        handler.get_name() == "execgym" and isinstance(handler.formatter, JsonFormatter)
        for handler in logging.getLogger().handlers
    )
