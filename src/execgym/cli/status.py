"""``execgym status``: breakers, workers and queue of a service or a broker, on stdout.

A service is asked over HTTP with the
standard library (``GET /v1/status``, ``POST /v1/breakers/TYPE/reset``); a broker
directly (queue depth, live workers and their heartbeats, dead letters).
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import click

from execgym.cli.options import json_flag, prefix_option, token_option
from execgym.errors import Error


def _request(url: str, token: str | None, *, method: str = "GET") -> Any:
    """JSON from ``url``.

    Raises:
        click.ClickException: naming what went wrong and how to fix it.
    """
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise click.UsageError(f"--url {url!r}: give http://HOST:PORT of `execgym serve`")
    # The scheme was checked above (http or https only), which S310 cannot see.
    request = urllib.request.Request(  # noqa: S310
        url, method=method, data=b"" if method == "POST" else None
    )
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 (checked above)
            return json.load(response)
    except urllib.error.HTTPError as error:
        try:
            message = json.load(error).get("message", "")
        except (ValueError, AttributeError):
            message = ""
        hint = " (give --token, or set EXECGYM_SERVER_TOKEN)" if error.code == 401 else ""
        raise click.ClickException(f"{url}: HTTP {error.code}: {message}{hint}") from error
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise click.ClickException(
            f"cannot reach {url}: {reason}; is `execgym serve` running there?"
        ) from error


def render_service(url: str, data: dict[str, Any]) -> str:
    """The text ``execgym status --url`` prints for a ``/v1/status`` answer."""
    verdicts = ", ".join(f"{v} {n}" for v, n in data["verdicts"].items()) or "none yet"
    lines = [
        f"service: {url} (up {data['uptime_s']:.0f} s)",
        f"throughput: {data['throughput_per_s']:.2f} rollouts/s over the last minute; "
        f"completed {data['completed']}",
        f"verdicts: {verdicts}",
        f"queue: {data['in_flight']} of {data['in_flight_limit']} in flight; "
        f"sandboxes active: {data['sandboxes_active']}",
    ]
    lines.extend(render_breakers(data["breakers"], data.get("breakers_enabled", True)))
    lines.append(f"workers: {len(data['workers'])}")
    for name, worker in data["workers"].items():
        health = "healthy" if worker["healthy"] else "UNHEALTHY"
        lines.append(
            f"  {name}: {health}, last heartbeat {worker['last_heartbeat_s_ago']:.1f} s ago"
        )
    return "\n".join(lines)


def render_breakers(breakers: list[dict[str, Any]], enabled: bool = True) -> list[str]:
    """One line per breaker, open ones first."""
    if not enabled:
        return ["breakers: off"]
    opened = sum(1 for b in breakers if b["state"] != "closed")
    lines = [f"breakers: {len(breakers)} task type(s), {opened} not closed"]
    order = {"open": 0, "half_open": 1, "closed": 2}
    for b in sorted(breakers, key=lambda b: (order.get(b["state"], 3), b["task_type"])):
        line = f"  {b['task_type']}: {b['state'].upper()}, {b['failures']} failure(s) in "
        line += f"{b['jobs']} job(s) in the window"
        if b["state"] != "closed":
            line += f", {b['quarantined']} quarantined"
            if b["retry_in_s"]:
                line += f", probe in {b['retry_in_s']:.0f} s"
            line += f": {b['reason']}"
        lines.append(line)
    return lines


async def _broker_status(url: str, prefix: str, reset_type: str | None, as_json: bool) -> str:
    """The queue, its workers, and the breakers every worker shares (one view)."""
    # Imported here: the broker loads the scoring stack, which `execgym --help` (it
    # lists every command) and `execgym status --url` have no use for.
    from execgym.broker import BrokerSettings, open_broker
    from execgym.broker.worker import describe_broker

    broker = open_broker(url, BrokerSettings(), prefix=prefix)
    board_of = getattr(broker, "breaker_board", None)
    lines: list[str] = []
    views: list[dict[str, Any]] | None = None
    try:
        if board_of is not None:
            board = board_of()
            if reset_type is not None:
                done = await board.reset(reset_type)
                state = "reset, now closed for every worker" if done else "no such breaker"
                lines.append(f"breaker {reset_type}: {state}")
            views = [view.to_json() for view in (await board.views()).values()]
    except BaseException:
        await broker.aclose()
        raise
    if as_json:
        await broker.aclose()
        return json.dumps({"breakers": views}, indent=2)
    report = await describe_broker(broker)  # closes the broker
    if url.startswith(("redis://", "rediss://", "unix://")):
        report += "\n" + await _episode_workers(url, prefix)
    if views is None:
        return f"{report}\nbreakers: this broker does not share them"
    shared = render_breakers(views)
    shared[0] += " (shared by every worker of the queue)"
    return "\n".join([report, *lines, *shared])


async def _episode_workers(url: str, prefix: str) -> str:
    """The live ``execgym episode-worker`` processes on this Redis and their episodes."""
    from execgym.broker.episode_router import RoutedEpisodes

    episodes = RoutedEpisodes(url, prefix=prefix)
    try:
        workers = await episodes.workers()
    finally:
        await episodes.aclose()
    live = sum(int(info.get("live", 0)) for info in workers.values())
    lines = [f"episode workers: {len(workers)} ({live} live episodes)"]
    for name, info in sorted(workers.items()):
        lines.append(f"  {name}: {info.get('live', 0)} of {info.get('max_episodes', '?')} episodes")
    return "\n".join(lines)


def _ray_status(url: str, reset_type: str | None) -> str:
    """The Ray cluster's one breaker view (its board actor), and its nodes."""
    from execgym.broker.ray_broker import cluster_status

    data = asyncio.run(cluster_status(url, reset_type))
    lines = [f"broker: ray ({url}): {data['nodes']} node(s), {data['cpus']:g} CPUs"]
    if reset_type is not None:
        done = "reset, now closed" if data["reset"] else "no such breaker on the cluster"
        lines.append(f"breaker {reset_type}: {done}")
    if data["breakers"] is None:
        lines.append("breakers: none yet (no batch with breakers has run on this cluster)")
    else:
        lines.extend(render_breakers(data["breakers"]))
    return "\n".join(lines)


@click.command()
@click.option("--url", default=None, help="An `execgym serve` service: http://HOST:PORT.")
@click.option(
    "--broker",
    "broker_url",
    default=None,
    help="A broker: redis://HOST:PORT/DB (its workers' shared breakers), or 'ray' / "
    "ray://HOST:PORT (the cluster's breakers, shared by its sandbox actors); --reset "
    "closes a breaker for every worker.",
)
@prefix_option
@token_option("The service's bearer token [env: EXECGYM_SERVER_TOKEN].")
@click.option("--reset", "reset_type", default=None, metavar="TYPE", help="Close TYPE's breaker.")
@json_flag("Print the service's JSON as is (with --broker redis://: the breakers).")
def status(
    url: str | None,
    broker_url: str | None,
    prefix: str,
    token: str | None,
    reset_type: str | None,
    as_json: bool,
) -> None:
    """Show circuit breakers, workers and the queue; reset a breaker with --reset.

    \b
    Examples:
      execgym status --url http://localhost:8080
      execgym status --url http://localhost:8080 --reset HumanEval
      execgym status --broker redis://localhost:6379/0
      execgym status --broker redis://localhost:6379/0 --reset HumanEval
      execgym status --broker ray --reset HumanEval
    """  # noqa: D301 - click keeps the lines after a backspace character ("\b") as they are
    if bool(url) == bool(broker_url):
        raise click.UsageError("give either --url (a service) or --broker (a queue)")
    if broker_url and (broker_url == "ray" or broker_url.startswith("ray://")):
        try:
            click.echo(_ray_status(broker_url, reset_type))
        except Error as error:
            raise click.ClickException(str(error)) from error
        return
    if broker_url:
        try:
            click.echo(asyncio.run(_broker_status(broker_url, prefix, reset_type, as_json)))
        except Error as error:
            raise click.ClickException(str(error)) from error
        return
    base = (url or "").rstrip("/")
    if reset_type:
        quoted = urllib.parse.quote(reset_type, safe="")
        answer = _request(f"{base}/v1/breakers/{quoted}/reset", token, method="POST")
        click.echo(f"breaker {answer['task_type']}: reset, now {answer['state']}")
        return
    data = _request(f"{base}/v1/status", token)
    click.echo(json.dumps(data, indent=2) if as_json else render_service(base, data))
