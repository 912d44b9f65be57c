"""Every Redis key and stream name execgym uses, in one place.

All names start with a prefix (``"execgym"`` by default), so one Redis can hold several
independent queues (one per team, or one per test) without their keys meeting.

=============================  ======  ================================================
name                           type    holds
=============================  ======  ================================================
``<prefix>:jobs``              stream  jobs waiting or running (acked ones are deleted)
``<prefix>:dead``              stream  jobs given up on, with the reason (capped)
``<prefix>:result:<job_id>``   string  the result of a job (JSON), kept ``result_ttl_s``
``<prefix>:done:<batch_id>``   stream  results of a batch as they finish, for its caller
``<prefix>:batch:<batch_id>``  set     ids of the batch's jobs queued so far (its caller's
                                       check that none was lost), kept ``result_ttl_s``
``<prefix>:worker:<name>``     string  a worker's heartbeat (JSON), expires when it dies
``<prefix>:episode:<id>``      hash    an agent episode's record: owner, state, steps,
                                       reward, why it ended (:mod:`.episode_records`)
``<prefix>:episode-host:<n>``  string  an episode worker's heartbeat (JSON), expires
                                       when it dies
``<prefix>:episode-hosts``     set     names of the episode workers (stale ones pruned)
``<prefix>:episode-in:<n>``    list    requests to the episode worker ``n``
``<prefix>:episode-out:<id>``  list    the answer to the request ``id``
``<prefix>:breaker:<type>``    hash    a task type's circuit breaker, shared by every
                                       worker (state, opened_at, retry_at, probe_at,
                                       quarantined, reason, window_s)
``<prefix>:breaker-jobs:<t>``  zset    its jobs finished in the window (score: time)
``<prefix>:breaker-fail:<t>``  zset    its infrastructure failures in the window
``<prefix>:breaker-types``     set     every task type that has a breaker
=============================  ======  ================================================

The consumer group on the jobs stream is :data:`GROUP`. The submit script in
:mod:`execgym.broker.redis_streams` builds ``result``, ``done`` and ``batch`` names from
the prefixes ``Keys.result("")``, ``Keys.done("")`` and ``Keys.batch("")`` it is given,
so they stay defined here.
"""

from __future__ import annotations

from dataclasses import dataclass

GROUP = "execgym-workers"
"""The consumer group every worker reads the jobs stream in."""

DEFAULT_PREFIX = "execgym"


@dataclass(frozen=True, slots=True)
class Keys:
    """Key names under one prefix.

    Args:
        prefix: Start of every key; no ``:`` at its end.
    """

    prefix: str = DEFAULT_PREFIX

    @property
    def jobs(self) -> str:
        """The jobs stream."""
        return f"{self.prefix}:jobs"

    @property
    def dead(self) -> str:
        """The dead-letter stream."""
        return f"{self.prefix}:dead"

    def result(self, job_id: str) -> str:
        """The key holding the result of ``job_id``."""
        return f"{self.prefix}:result:{job_id}"

    def done(self, batch_id: str) -> str:
        """The stream announcing the results of ``batch_id``."""
        return f"{self.prefix}:done:{batch_id}"

    def batch(self, batch_id: str) -> str:
        """The set of ``batch_id``'s job ids queued so far."""
        return f"{self.prefix}:batch:{batch_id}"

    def worker(self, name: str) -> str:
        """The heartbeat key of the worker ``name``."""
        return f"{self.prefix}:worker:{name}"

    def breaker(self, task_type: str) -> str:
        """The hash holding ``task_type``'s shared circuit breaker."""
        return f"{self.prefix}:breaker:{task_type}"

    def breaker_jobs(self, task_type: str) -> str:
        """The sorted set of ``task_type``'s jobs finished in the window."""
        return f"{self.prefix}:breaker-jobs:{task_type}"

    def breaker_failures(self, task_type: str) -> str:
        """The sorted set of ``task_type``'s infrastructure failures in the window."""
        return f"{self.prefix}:breaker-fail:{task_type}"

    @property
    def breaker_types(self) -> str:
        """The set of task types that have a shared breaker."""
        return f"{self.prefix}:breaker-types"

    @property
    def workers_pattern(self) -> str:
        """A ``SCAN MATCH`` pattern for every worker's heartbeat key."""
        return f"{self.prefix}:worker:*"

    def episode(self, episode_id: str) -> str:
        """The hash recording the agent episode ``episode_id`` (owner, state, reward)."""
        return f"{self.prefix}:episode:{episode_id}"

    def episode_host(self, name: str) -> str:
        """The heartbeat key of the episode worker ``name`` (gone: the worker is gone)."""
        return f"{self.prefix}:episode-host:{name}"

    @property
    def episode_hosts(self) -> str:
        """The set of the episode workers' names."""
        return f"{self.prefix}:episode-hosts"

    def episode_requests(self, name: str) -> str:
        """The list of requests (open, step, close) to the episode worker ``name``."""
        return f"{self.prefix}:episode-in:{name}"

    def episode_reply(self, request_id: str) -> str:
        """The list the answer to the episode request ``request_id`` is pushed on."""
        return f"{self.prefix}:episode-out:{request_id}"
