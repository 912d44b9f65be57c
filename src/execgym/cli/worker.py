"""``execgym worker``: judge jobs from a broker in sandboxes until SIGTERM.

The loop itself is :func:`execgym.broker.worker.run_node`; this module turns the options into a
:class:`~execgym.broker.worker.Worker` and serves its metrics when asked.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any

import click

from execgym.cli.options import (
    allow_root_option,
    breakers_option,
    count_option,
    isolation_option,
    prefix_option,
    reward_option,
    sandbox_for,
    seconds_option,
    warm_pool_option,
)
from execgym.errors import Error

if TYPE_CHECKING:
    from execgym.ops.breakers import Breakers
    from execgym.ops.metrics import Metrics


@click.command()
@click.option(
    "--broker",
    "broker_url",
    required=True,
    help="The queue to consume: redis://HOST:PORT/DB (or 'embedded', for trying it out).",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=None,
    help="Sandboxes at once [default: CPU count].",
)
@isolation_option()
@warm_pool_option("As for score.")
@allow_root_option()
@count_option(
    "--max-attempts",
    3,
    "Deliveries that may end without a result before a job is dead-lettered.",
)
@seconds_option(
    "--visibility-timeout",
    "visibility_timeout_s",
    60.0,
    "Seconds without a heartbeat after which a worker's jobs go to others "
    "(the same for every worker of a queue).",
)
@seconds_option(
    "--drain-timeout",
    "drain_timeout_s",
    30.0,
    "On SIGTERM, seconds running jobs may take before they are handed back.",
)
@prefix_option
@click.option("--check", is_flag=True, help="Check the broker and print its state, then exit.")
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve Prometheus metrics on this port (0: any free port) [default: none].",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="Address of --metrics-port (0.0.0.0 for a Prometheus on another host).",
)
@breakers_option
@reward_option
def worker(
    broker_url: str,
    concurrency: int | None,
    isolation: str,
    warm_pool: bool,
    allow_root: bool,
    max_attempts: int,
    visibility_timeout_s: float,
    drain_timeout_s: float,
    prefix: str,
    check: bool,
    metrics_port: int | None,
    metrics_host: str,
    breakers: Breakers | None,
    reward_name: str | None,
) -> None:
    """Judge jobs from a broker in sandboxes until SIGTERM (then drain and exit 0).

    \b
    Examples:
      execgym worker --broker redis://localhost:6379/0 --concurrency 8
      execgym worker --broker redis://localhost:6379/0 --reward quality
      execgym worker --broker redis://localhost:6379/0 --check
    """  # noqa: D301 - click keeps the lines after a backspace character ("\b") as they are
    from execgym.broker import BrokerSettings, open_broker
    from execgym.broker.worker import Worker, WorkerSettings, describe_broker
    from execgym.reward import load_spec

    settings = BrokerSettings(visibility_timeout_s=visibility_timeout_s)
    try:
        broker = open_broker(broker_url, settings, prefix=prefix)
        if check:
            click.echo(asyncio.run(describe_broker(broker)))
            return
        reward = load_spec(reward_name) if reward_name is not None else None
        sandbox = sandbox_for(isolation, warm_pool, allow_root, validating=True)
        # Tasks' environments get a plain sandbox of the same tier: the host paths bound
        # above for validation jobs do not exist in (and cannot be made in) their roots.
        from execgym.environments.routing import EnvironmentSandboxes, default_store

        plain = sandbox_for(isolation, warm_pool, allow_root)
        environments = EnvironmentSandboxes(plain, store=default_store())
        metrics = serve_metrics(metrics_host, metrics_port) if metrics_port is not None else None
        node = Worker(
            broker,
            sandbox,
            WorkerSettings(
                concurrency=concurrency or os.cpu_count() or 1,
                max_attempts=max_attempts,
                drain_timeout_s=drain_timeout_s,
            ),
            breakers=breakers,
            metrics=metrics,
            reward=reward,
            environments=environments,
        )
        asyncio.run(_run(node, plain))
    except Error as error:
        raise click.ClickException(str(error)) from error


def serve_metrics(host: str, port: int) -> Metrics:
    """Start prometheus-client's HTTP server (a daemon thread) for a worker's metrics."""
    from prometheus_client import start_http_server

    from execgym.ops.metrics import Metrics

    metrics = Metrics()
    try:
        server, _ = start_http_server(port, addr=host, registry=metrics.registry)
    except OSError as error:
        raise click.ClickException(
            f"cannot serve metrics on {host}:{port}: {error.strerror or error}; "
            "choose another --metrics-port"
        ) from error
    click.echo(f"metrics: http://{host}:{server.server_port}/metrics", err=True)
    return metrics


async def _run(node: Any, plain: Any) -> None:
    """:func:`~execgym.broker.worker.run_node`, then close the environments' template."""
    from execgym.broker.worker import run_node

    try:
        await run_node(node)
    finally:
        await plain.aclose()
