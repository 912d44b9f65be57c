"""``execgym serve``: the HTTP API (FastAPI under uvicorn), and who may reach it.

Settings not given as options come from ``EXECGYM_SERVER_*`` variables
(:meth:`execgym.server.ServerSettings.from_env`).
"""

from __future__ import annotations

import ipaddress
import socket

import click

from execgym.cli.options import (
    allow_root_option,
    isolation_option,
    optional_size,
    token_option,
    warm_pool_option,
    workers_option,
)
from execgym.errors import Error
from execgym.ops import logs
from execgym.ops.breakers import DEFAULT_SPEC


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` resolves to is a loopback address (127/8, ::1)."""
    try:
        infos = socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return False
    return bool(infos) and all(
        ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos
    )


def check_exposure(host: str, token: str | None, allowed: bool) -> None:
    """Refuse to serve beyond loopback without a token unless explicitly allowed.

    Raises:
        click.UsageError: for a non-loopback ``host`` without a token or the allowance.
    """
    if token is not None or is_loopback(host):
        return
    risk = (
        f"--host {host!r} is reachable from other machines and no token is set: anyone "
        "who reaches it can run code in its sandboxes and read every job's results"
    )
    if not allowed:
        raise click.UsageError(
            f"{risk}. Set a token (--token or EXECGYM_SERVER_TOKEN; clients send "
            "'Authorization: Bearer <token>'), listen on 127.0.0.1, or, on a private "
            "network you trust, add --allow-no-token"
        )
    click.echo(f"WARNING: {risk} (--allow-no-token)", err=True)


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=8080, show_default=True)
@token_option(
    "Require 'Authorization: Bearer TOKEN' [env: EXECGYM_SERVER_TOKEN; default: no auth]."
)
@workers_option("Sandboxes running at once, over all requests [default: CPU count].")
@click.option(
    "--max-in-flight",
    type=click.IntRange(min=1),
    default=None,
    help="Rollouts and programs accepted but unfinished; past it requests get 429.",
)
@isolation_option("[default: bwrap]", default=None)
@warm_pool_option("[default: on]", default=None)
@allow_root_option(unset_is_none=True)
@click.option(
    "--breakers",
    "breakers_spec",
    default=None,
    help=f"Circuit breakers for /v1/score, as for score [default: {DEFAULT_SPEC}].",
)
@click.option(
    "--broker",
    "broker_url",
    default=None,
    help="Where /v1/score jobs are judged: embedded (here), redis://HOST:PORT/DB "
    "(execgym worker processes on that Redis) or ray / ray://HOST:PORT "
    "[env: EXECGYM_SERVER_BROKER; default: embedded].",
)
@click.option(
    "--run-code-network",
    type=click.Choice(["none", "loopback"]),
    default=None,
    help="Network of /run_code programs: loopback lets a program serve and call itself "
    "on 127.0.0.1 (never beyond) [default: none].",
)
@click.option(
    "--max-body",
    "max_body",
    default=None,
    metavar="SIZE",
    callback=optional_size,
    help="Largest request body, e.g. 16MiB; larger ones get 413 "
    "[env: EXECGYM_SERVER_MAX_BODY_BYTES; default: 64MiB].",
)
@click.option(
    "--allow-no-token",
    is_flag=True,
    default=None,
    help="Listen on a non-loopback --host without a token (refused otherwise) "
    "[env: EXECGYM_SERVER_ALLOW_NO_TOKEN].",
)
def serve(
    host: str,
    port: int,
    token: str | None,
    workers: int | None,
    max_in_flight: int | None,
    isolation: str | None,
    warm_pool: bool | None,
    allow_root: bool | None,
    breakers_spec: str | None,
    broker_url: str | None,
    run_code_network: str | None,
    max_body: int | None,
    allow_no_token: bool | None,
) -> None:
    """Serve the HTTP API: /v1/score, /v1/run, SandboxFusion's /run_code (docs at /docs).

    Other settings come from EXECGYM_SERVER_* variables (see docs/server.md). Without a
    token, only a loopback --host is allowed unless --allow-no-token is given.
    """
    try:
        import uvicorn

        from execgym.server import ServerSettings, create_app
    except ImportError as error:
        raise click.ClickException(
            f"{error}; the HTTP service needs the 'server' extra: pip install 'execgym[server]'"
        ) from error
    try:
        settings = ServerSettings.from_env(
            token=token,
            workers=workers,
            max_in_flight=max_in_flight,
            isolation=isolation,
            warm_pool=warm_pool,
            allow_root=allow_root or None,
            breakers=breakers_spec,
            broker=broker_url,
            run_code_network=run_code_network,
            max_body_bytes=max_body,
            allow_no_token=allow_no_token or None,
        )
        check_exposure(host, settings.token, settings.allow_no_token)
        app = create_app(settings)
    except Error as error:
        raise click.ClickException(str(error)) from error
    from execgym.server.protocol import header_deadline_protocol

    http = header_deadline_protocol(settings.header_timeout_s)
    if logs.json_configured():  # uvicorn's records go to our JSON handler, not its own
        uvicorn.run(app, host=host, port=port, log_level="info", log_config=None, http=http)
    else:
        uvicorn.run(app, host=host, port=port, log_level="info", http=http)
