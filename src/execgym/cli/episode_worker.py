"""``execgym episode-worker``: hold agent episodes' sessions for ``execgym serve`` replicas.

The loop is :func:`execgym.broker.episode_host.serve_episodes`; see
:mod:`execgym.broker.episode_host` for what a worker does and how its death is found.
"""

from __future__ import annotations

import asyncio

import click

from execgym.cli.options import count_option, prefix_option, seconds_option
from execgym.errors import Error


@click.command("episode-worker")
@click.option(
    "--broker",
    "broker_url",
    required=True,
    help="The Redis the service's replicas use: redis://HOST:PORT/DB "
    "(their EXECGYM_SERVER_EPISODE_BROKER).",
)
@count_option("--max-episodes", 8, "Live episodes (sandbox sessions) at once.")
@seconds_option(
    "--idle-timeout",
    "idle_timeout_s",
    300.0,
    "Seconds without a step after which an episode is closed and forgotten.",
)
@seconds_option(
    "--heartbeat-ttl",
    "heartbeat_ttl_s",
    10.0,
    "Seconds after this worker dies before its episodes are ended (reward null).",
)
@seconds_option(
    "--drain-timeout",
    "drain_timeout_s",
    30.0,
    "On SIGTERM, seconds the steps in progress may take before the rest are ended.",
)
@prefix_option
def episode_worker(
    broker_url: str,
    max_episodes: int,
    idle_timeout_s: float,
    heartbeat_ttl_s: float,
    drain_timeout_s: float,
    prefix: str,
) -> None:
    """Hold agent episodes for execgym serve replicas until SIGTERM.

    Episodes run in this host's sandboxes (bwrap sessions), so their tasks' repository
    snapshots must be readable here at the paths the replicas resolve (the shipped
    examples always are). A worker that dies ends its episodes with reward null and
    the reason, once --heartbeat-ttl has passed.

    \b
    Examples:
      execgym episode-worker --broker redis://localhost:6379/0 --max-episodes 16
      EXECGYM_SERVER_EPISODE_BROKER=redis://localhost:6379/0 execgym serve
    """  # noqa: D301 - click keeps the lines after a backspace character ("\b") as they are
    from execgym.broker.episode_host import EpisodeHost, EpisodeHostSettings, serve_episodes
    from execgym.episodes.protocol import local_env_factory

    try:
        settings = EpisodeHostSettings(
            max_episodes=max_episodes,
            idle_timeout_s=idle_timeout_s,
            heartbeat_ttl_s=heartbeat_ttl_s,
            drain_timeout_s=drain_timeout_s,
        )
        host = EpisodeHost(broker_url, local_env_factory(), settings, prefix=prefix)
        asyncio.run(serve_episodes(host))
    except Error as error:
        raise click.ClickException(str(error)) from error
