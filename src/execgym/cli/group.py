"""The ``execgym`` group: global options, signals, and each command loaded when run.

A command's module is imported only when that command runs (or ``--help`` lists the
commands), so ``execgym score`` pays for no other command's imports.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import signal
import sys

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


class _Group(click.Group):
    """Ctrl-C, SIGTERM or SIGHUP at any stage (loading, self-test) exits 128 + signal.

    Quietly, after the sandboxes started so far are stopped: click's own handling prints
    "Aborted!" and exits 1, and SIGTERM or SIGHUP would kill us at once. A scoring batch
    that is running handles the signals itself (it reports the results written so far).
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] in SANDBOXED and not {"--help", "-h"} & set(args):
            # Before the command's imports (a tenth of a second): the sandbox it makes
            # then finds the toolchains' probes done.
            from execgym.toolchains import find_toolchains_soon

            find_toolchains_soon()
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
