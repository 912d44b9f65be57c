"""The ``execgym`` group: global options, signals, and each command loaded when run.

A command's module is imported only when that command runs (or ``--help`` lists the
commands), so ``execgym score`` pays for no other command's imports.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

import click

from execgym._version import __version__
from execgym.errors import Error
from execgym.ops import logs

# Leaving the interpreter, CPython collects every object it ever tracked, a last full
# garbage collection that took 0.05-0.1 s of CPU after a command had loaded click,
# asyncio, pydantic and the judges (a fifth of `execgym score`'s fixed cost, issue 23).
# Registered when the command line is imported, this runs after the exit hooks
# registered later (the cgroup remover's flush, the prestarter's close; logging's
# flush, registered earlier, needs no collection), and freezes what is left: the modules are
# still torn down and their objects freed by reference count; only cycles that are
# garbage by then are left to the kernel, which frees the whole process. Every file
# execgym writes is closed (or flushed) before, by its owner.
atexit.register(gc.freeze)

COMMANDS = {
    "checkpoints": ("execgym.cli.storage", "checkpoints"),
    "data": ("execgym.cli.storage", "data"),
    "env": ("execgym.cli.env", "env"),
    "episode-worker": ("execgym.cli.episode_worker", "episode_worker"),
    "episodes": ("execgym.cli.episodes", "episodes"),
    "score": ("execgym.cli.score", "score"),
    "serve": ("execgym.cli.serve", "serve"),
    "status": ("execgym.cli.status", "status"),
    "storage": ("execgym.cli.storage", "storage"),
    "validate": ("execgym.cli.validate", "validate"),
    "worker": ("execgym.cli.worker", "worker"),
}
"""``{command: (module, attribute)}``: every subcommand, imported when it is run."""

SANDBOXED = ("score",)
"""Commands that make a sandbox before their first result: the toolchains (whose
directories every sandbox sees) are looked for while the command's modules load."""


_paused: list[bool] = []  # [True] while pause_collection() holds the collector off
_whole_process: list[bool] = []  # [True]: the command line is this process's own
_ran_sandboxed: list[bool] = []  # [True]: the command is one of SANDBOXED


def _exit_now(code: object) -> None:
    """End the process with ``code`` (as ``sys.exit``) after its exit hooks, at once.

    What the interpreter does after them is take every module apart and free its
    objects one by one: 10-20 ms of CPU after ``execgym score`` loaded click, asyncio,
    pydantic and the judges, for memory the kernel takes back whole. The exit hooks
    (logging's flush, the cgroup remover's, the warm pool's) and the standard streams'
    flush still run; every file execgym writes is closed by its owner before (the
    results file by the batch).
    """
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # sys.exit("message"): printed, status 1, as the interpreter does
        sys.stderr.write(f"{code}\n")
        status = 1
    for thread in threading.enumerate():  # as the interpreter does before its hooks
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing to say
            stream.flush()
    os._exit(status)


def pause_collection() -> None:
    """Hold CPython's cyclic garbage collector off while a command starts.

    Start-up allocates a few hundred thousand objects (click, asyncio, pydantic and its
    models, the judges), none of them garbage, and the collector walked them again and
    again as they were made: about a tenth of ``execgym score``'s start-up CPU.
    :func:`resume_collection` ends it (a batch does once its loading is done; the
    group does when the command ends). Nothing if the collector is off already.
    """
    if gc.isenabled() and not _paused:
        gc.disable()
        _paused.append(True)


def resume_collection(*, freeze: bool) -> None:
    """Turn the collector back on after :func:`pause_collection`; nothing otherwise.

    Args:
        freeze: Move every object made so far out of the collector's reach
            (``gc.freeze``: the modules and the start-up's objects live as long as
            the process), so its first collections do not walk them all. Only when
            the process runs the command line it was started with (``execgym ...``,
            not a caller that passes arguments and goes on after it, as tests do).
    """
    if _paused:
        _paused.clear()
        if freeze and _whole_process:
            gc.freeze()
        gc.enable()


class _Group(click.Group):
    """Ctrl-C, SIGTERM or SIGHUP at any stage (loading, self-test) exits 128 + signal.

    Quietly, after the sandboxes started so far are stopped: click's own handling prints
    "Aborted!" and exits 1, and SIGTERM or SIGHUP would kill us at once. A scoring batch
    that is running handles the signals itself (it reports the results written so far).
    """

    def main(self, args: Sequence[str] | None = None, *rest: Any, **options: Any) -> Any:
        if args is not None:  # a caller's list (tests, a library): it goes on after us
            return super().main(args, *rest, **options)
        _whole_process.append(True)  # the process's own command line (sys.argv)
        try:
            return super().main(args, *rest, **options)
        except SystemExit as done:
            if _ran_sandboxed:
                _exit_now(done.code)
            raise

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] in SANDBOXED and not {"--help", "-h"} & set(args):
            _ran_sandboxed.append(True)
            # Before the command's imports (a tenth of a second): the sandbox it makes
            # then finds the toolchains' probes done.
            from execgym.toolchains import find_toolchains_soon

            find_toolchains_soon()
            # (pyseccomp, whose import ran `ldconfig -p` twice, was imported on a thread
            # here: the seccomp filter is now kept in the program cache, and pyseccomp
            # is imported only to build it, execgym.sandbox._seccomp)
            pause_collection()
        return super().resolve_command(ctx, args)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in COMMANDS:
            module, name = COMMANDS[cmd_name]
            command = getattr(importlib.import_module(module), name)
        return command

    def invoke(self, ctx: click.Context) -> object:
        stopped_by: list[int] = []

        def stop(signum: int, frame: object) -> None:
            stopped_by.append(signum)
            raise KeyboardInterrupt  # unwinds like Ctrl-C: the sandboxes' cleanup runs

        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, stop)
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(128 + (stopped_by[0] if stopped_by else signal.SIGINT))
        finally:
            resume_collection(freeze=False)  # a command that stopped before its batch


@click.group(cls=_Group)
@click.version_option(__version__, prog_name="execgym")
@click.option(
    "--log-level",
    type=click.Choice(logs.LEVELS, case_sensitive=False),
    default=None,
    help="Log level on stderr [env: EXECGYM_LOG_LEVEL; default: warning].",
)
@click.option(
    "--log-format",
    type=click.Choice(logs.FORMATS),
    default=None,
    help="text, or json (one object per line) [env: EXECGYM_LOG_FORMAT; default: text].",
)
def main(log_level: str | None, log_format: str | None) -> None:
    """execgym: score model-written code in isolated sandboxes and return rewards."""
    try:
        level, fmt = logs.settings_from(log_level, log_format)
    except Error as error:
        raise click.UsageError(str(error)) from error
    explicit = bool(log_level or log_format or os.environ.get("EXECGYM_LOG_LEVEL"))
    logs.configure(level, fmt, force=explicit or fmt == "json")
