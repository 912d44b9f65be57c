"""Job queues between trainers and sandbox workers: embedded (default), Redis Streams or Ray.

>>> from execgym.broker import open_broker                 # doctest: +SKIP
>>> broker = open_broker("redis://localhost:6379/0")        # doctest: +SKIP
>>> async for result in score_jobs(broker, jobs): ...       # doctest: +SKIP

See :mod:`execgym.broker.base` for the delivery semantics and
:mod:`execgym.broker.redis_streams` for how they map onto Redis.
"""

from __future__ import annotations

from execgym.broker.base import Broker, BrokerSettings, DeadLetter, Delivery
from execgym.broker.client import RemoteBatch, make_jobs, score_jobs, score_rollouts
from execgym.broker.keys import GROUP, Keys
from execgym.broker.memory import MemoryBroker
from execgym.broker.messages import MESSAGE_VERSION, JobMessage, ResultMessage
from execgym.errors import ConfigError

EMBEDDED = ("embedded", "memory")
"""Broker URLs that mean the in-process broker."""


def open_broker(
    url: str = "embedded", settings: BrokerSettings | None = None, *, prefix: str = "execgym"
) -> Broker:
    """The broker a URL names: ``embedded``, ``redis://...``, ``ray`` or ``ray://...``.

    ``redis://HOST:PORT/DB`` (or ``rediss://``); ``ray`` is the Ray cluster this
    process runs in or can reach (``ray.init(address="auto")``), ``ray://HOST:PORT``
    one reached through Ray Client.

    A Ray broker made here has the default actors (bwrap with the warm pool, one per
    node, no reward spec); make a :class:`~execgym.broker.ray_broker.RayBroker` to
    choose them.

    Raises:
        ConfigError: for any other URL, saying which forms are understood.
    """
    if url in EMBEDDED:
        return MemoryBroker(settings or BrokerSettings())
    if url.startswith(("redis://", "rediss://", "unix://")):
        from execgym.broker.redis_streams import RedisStreamsBroker

        return RedisStreamsBroker(url, settings, prefix=prefix)
    if url == "ray" or url.startswith("ray://"):
        from execgym.broker.ray_broker import RayBroker

        return RayBroker(url, settings=settings or BrokerSettings())  # type: ignore[return-value]
    raise ConfigError(
        f"unknown broker {url!r}: use 'embedded' (in-process, the default), "
        "redis://HOST:PORT/DB (e.g. redis://localhost:6379/0), 'ray' (the running Ray "
        "cluster) or ray://HOST:PORT"
    )


__all__ = [
    "EMBEDDED",
    "GROUP",
    "MESSAGE_VERSION",
    "Broker",
    "BrokerSettings",
    "DeadLetter",
    "Delivery",
    "JobMessage",
    "Keys",
    "MemoryBroker",
    "RemoteBatch",
    "ResultMessage",
    "make_jobs",
    "open_broker",
    "score_jobs",
    "score_rollouts",
]
