"""Options that several commands share, each defined once, and their checks.

A decorator factory takes what differs between commands (the help text, a default)
and keeps the rest (the name, the type, the check) in one place. Imported by every
command module, so it imports only what ``execgym score`` needs anyway.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

import click

from execgym.errors import Error
from execgym.limits import DEFAULT_LIMITS, MAX_BYTES, MAX_SECONDS, MIN_MEMORY_BYTES, parse_size
from execgym.ops.breakers import DEFAULT_SPEC, Breakers, from_spec
from execgym.sandbox import ISOLATIONS, Sandbox, open_sandbox

F = TypeVar("F", bound=Callable[..., Any])
Decorator = Callable[[F], F]

DATASETS = (
    "humaneval",
    "humanevalplus",
    "mbpp",
    "mbppplus",
    "humaneval-x-python",
    "humaneval-x-cpp",
    "humaneval-x-java",
    "humaneval-x-js",
    "humaneval-x-go",
    "humaneval-x-rust",
    "leetcodedataset",
    "bigcodebench-hard",
    "bigcodebench-hard-instruct",
)
"""The built-in data sets (:data:`execgym.tasks.datasets.DATASETS`; a test keeps them
equal), named here so that ``execgym --help`` and ``score`` start without loading them."""

EMBEDDED = ("embedded", "memory")
"""Broker URLs that mean the in-process broker (as :data:`execgym.broker.EMBEDDED`)."""


def positive_seconds(
    ctx: click.Context | None, param: click.Parameter | None, value: float | None
) -> float | None:
    """Click callback: ``value`` seconds if positive, finite and at most one day.

    Raises:
        click.BadParameter: otherwise, naming the bound.
    """
    if value is not None and not (math.isfinite(value) and value > 0):
        raise click.BadParameter(f"{value!r}: give a positive, finite number of seconds")
    if value is not None and value > MAX_SECONDS:
        raise click.BadParameter(f"{value!r}: give at most {MAX_SECONDS:g} seconds (one day)")
    return value


def memory_size(ctx: click.Context | None, param: click.Parameter | None, value: str) -> int:
    """Click callback: ``value`` (``256MiB``, ``1GiB``, bare bytes) in bytes.

    Raises:
        click.BadParameter: for a size that does not parse, is under 16 MiB (with a hint
            when a bare number was probably meant as MiB) or over 2**62 bytes.
    """
    try:
        size = parse_size(value)
    except Error as error:
        raise click.BadParameter(str(error)) from error
    if size < MIN_MEMORY_BYTES:
        hint = (
            f"; a number without a unit is bytes: did you mean {value.strip()}MiB?"
            if value.strip().isdigit()
            else ""
        )
        raise click.BadParameter(
            f"{value!r} is {size} bytes, too little to start a program (at least 16MiB){hint}"
        )
    if size > MAX_BYTES:
        raise click.BadParameter(f"{value!r} is more than the most allowed, 2**62 bytes")
    return size


def optional_size(
    ctx: click.Context | None, param: click.Parameter | None, value: str | None
) -> int | None:
    """Click callback: ``value`` in bytes, or None when not given.

    Raises:
        click.BadParameter: for a size that does not parse.
    """
    try:
        return None if value is None else parse_size(value)
    except Error as error:
        raise click.BadParameter(str(error)) from error


def _breakers(ctx: click.Context, param: click.Parameter, value: str) -> Breakers | None:
    try:
        return from_spec(value)
    except Error as error:
        raise click.BadParameter(str(error)) from error


breakers_option = click.option(
    "--breakers",
    default=DEFAULT_SPEC,
    show_default=True,
    callback=_breakers,
    help="Circuit breakers per task type: 'off', or NAME=VALUE pairs (failures, "
    "failure_rate, min_jobs, window_s, cooldown_s, key=dataset|family|task).",
)
"""``--breakers SPEC`` parsed into :class:`~execgym.ops.breakers.Breakers` (or None: off)."""

dataset_option = click.option(
    "--dataset", type=click.Choice(DATASETS), help="A built-in data set instead of TASKS."
)

reward_option = click.option(
    "--reward",
    "reward_name",
    default=None,
    metavar="PRESET|FILE.toml",
    help="Reward spec: binary, fraction, quality, or a TOML file; results then carry "
    "reward_breakdown [default: the binary reward, no breakdown].",
)
"""``--reward PRESET|FILE.toml``: the name, loaded by :func:`execgym.reward.load_spec`."""

prefix_option = click.option(
    "--prefix", default="execgym", show_default=True, help="Key prefix in Redis."
)


def isolation_option(
    help: str = "Sandbox backend; 'none' runs code UNISOLATED (development only).",
    default: str | None = "bwrap",
) -> Decorator[Any]:
    """``--isolation``: one of :data:`execgym.sandbox.ISOLATIONS`."""
    return click.option(
        "--isolation",
        type=click.Choice(ISOLATIONS),
        default=default,
        show_default=True if default is not None else None,  # None: click's own default
        help=help,
    )


def warm_pool_option(help: str, default: bool | None = True) -> Decorator[Any]:
    """``--warm-pool/--no-warm-pool``: fork Python runs from the warm pool (bwrap)."""
    return click.option(
        "--warm-pool/--no-warm-pool",
        default=default,
        show_default=True if default is not None else None,  # None: click's own default
        help=help,
    )


def allow_root_option(
    help: str = "Let --isolation none run as root.", *, unset_is_none: bool = False
) -> Decorator[Any]:
    """``--allow-root``: let the unisolated backend run as root.

    ``unset_is_none``: None when not given (``serve``: the environment decides).
    """
    unset = {"default": None} if unset_is_none else {}
    return click.option("--allow-root", is_flag=True, help=help, **unset)


def workers_option(help: str) -> Decorator[Any]:
    """``--workers N``: sandboxes at once (None: the CPU count)."""
    return click.option("--workers", type=click.IntRange(min=1), default=None, help=help)


def timeout_option(help: str) -> Decorator[Any]:
    """``--timeout SECONDS`` as ``wall_time_s`` (:func:`positive_seconds`)."""
    return click.option(
        "--timeout",
        "wall_time_s",
        type=float,
        default=DEFAULT_LIMITS.wall_time_s,
        show_default=True,
        callback=positive_seconds,
        help=help,
    )


def seconds_option(flag: str, name: str, default: float, help: str) -> Decorator[Any]:
    """A ``--flag SECONDS`` option with a default, checked by :func:`positive_seconds`."""
    return click.option(
        flag,
        name,
        type=float,
        default=default,
        show_default=True,
        callback=positive_seconds,
        help=help,
    )


def fraction_option(flag: str, default: float, help: str) -> Decorator[Any]:
    """A ``--flag X`` option for a fraction, 0 to 1."""
    return click.option(
        flag, type=click.FloatRange(0, 1), default=default, show_default=True, help=help
    )


def count_option(flag: str, default: int, help: str, minimum: int = 1) -> Decorator[Any]:
    """A ``--flag N`` option for a count of at least ``minimum``."""
    return click.option(
        flag, type=click.IntRange(min=minimum), default=default, show_default=True, help=help
    )


def token_option(help: str) -> Decorator[Any]:
    """``--token``, also read from ``EXECGYM_SERVER_TOKEN``."""
    return click.option("--token", envvar="EXECGYM_SERVER_TOKEN", default=None, help=help)


def json_flag(help: str) -> Decorator[Any]:
    """``--json`` as ``as_json``."""
    return click.option("--json", "as_json", is_flag=True, help=help)


def sandbox_for(
    isolation: str, warm_pool: bool, allow_root: bool, *, validating: bool = False
) -> Sandbox:
    """The sandbox that ``--isolation``, ``--warm-pool`` and ``--allow-root`` ask for.

    The warm pool for bwrap unless turned off (see :func:`execgym.sandbox.open_sandbox`).
    ``validating``: the coverage package's site (:func:`execgym.validation.coverage_site`)
    is also visible read-only, for validation jobs (``execgym validate --broker``).

    Raises:
        execgym.errors.Error: the backend cannot run on this host (SandboxUnavailable)
            or is unknown (ConfigError).
    """
    paths = None
    if validating:
        from execgym.broker.validation_jobs import worker_read_only_paths

        paths = worker_read_only_paths()
    return open_sandbox(
        isolation, warm_pool=warm_pool, allow_root=allow_root, read_only_paths=paths
    )
