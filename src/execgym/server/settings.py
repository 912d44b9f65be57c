"""Process settings of the HTTP service, read from the environment only at the edge.

Precedence: ``execgym serve`` flags > ``EXECGYM_SERVER_*`` variables > defaults.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields

from execgym.errors import ConfigError
from execgym.limits import MiB, parse_size
from execgym.ops.breakers import DEFAULT_SPEC, from_spec

ENV_PREFIX = "EXECGYM_SERVER_"


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """How the service runs; immutable, passed to :func:`execgym.server.create_app`.

    Args:
        token: Bearer token every request but ``/healthz`` and ``/readyz`` must carry
            (``Authorization: Bearer <token>``); ``None`` turns authentication off.
        isolation: Sandbox backend: ``"bwrap"``, ``"gvisor"`` or ``"none"``.
        warm_pool: With bwrap, fork Python runs from a warm interpreter.
        allow_root: Let ``isolation="none"`` run code as root (refused otherwise).
        workers: Sandboxes running at once, over every request and job.
        max_in_flight: Rollouts and programs accepted but not finished (queued or
            running); past it a request gets 429 with ``Retry-After``.
        max_body_bytes: Largest request body, in bytes; larger ones get 413 (by
            ``Content-Length`` before reading, or counted while a chunked body is read).
        body_idle_timeout_s: Longest wait for the next bytes of a request body, in
            seconds (then 408); also the grace period before the average rate counts.
        min_body_rate_bytes_per_s: Slowest average rate of a request body after
            ``body_idle_timeout_s``, in bytes per second (then 408).
        header_timeout_s: Longest a connection of ``execgym serve`` may take to send a
            request's headers, in seconds, from when it opens or its previous response
            ends; then it is closed (uvicorn has no such timeout of its own).
        allow_no_token: Let ``execgym serve`` listen on an address other than loopback
            without a token (refused otherwise: anyone who reaches it could run code).
        max_batch: Most rollouts in one ``POST /v1/score``.
        job_ttl_s: Seconds a finished job's results stay retrievable.
        max_wall_time_s: Largest compile or run timeout a request may ask for, seconds.
        max_memory_bytes: Largest memory a request may ask for, in bytes.
        default_memory_bytes: Memory of a run whose request does not say, in bytes.
        readiness_ttl_s: Seconds a passed sandbox self-test keeps ``/readyz`` green
            before it is run again.
        max_episodes: Most live agent episodes (``/v1/episodes``, ``/reset``) at once;
            past it opening one gets 429 with ``Retry-After``.
        episode_idle_timeout_s: Seconds without a step after which an episode is
            closed and forgotten (finished ones too).
        episode_tasks: A ``RepoTask`` file or directory whose tasks episodes may be
            opened on by id, besides the shipped examples.
        episode_broker: ``redis://HOST:PORT/DB``: keep no episode in this process but
            open each on an episode worker (``execgym episode-worker``) through this
            Redis, so several replicas of the service share the episodes and one that
            dies loses none (:mod:`execgym.broker.episode_router`); ``ray`` or
            ``ray://HOST:PORT``: the same on episode actors of that Ray cluster
            (:mod:`execgym.broker.ray_episodes`; ``max_episodes`` per actor). ``None``:
            episodes live in this process (``max_episodes``, ``episode_idle_timeout_s``).
        episode_prefix: The Redis key prefix of ``episode_broker`` (the workers'
            ``--prefix``).
        episode_actor_cpus: With ``episode_broker`` ``ray``: the CPUs each episode
            actor reserves in Ray's accounting (its sessions' commands use them).
        pod_name: Reported as ``executor_pod_name`` by ``/run_code`` (in Kubernetes, set
            ``EXECGYM_SERVER_POD_NAME`` from the pod's ``metadata.name``).
        run_code_network: The network of ``/run_code`` programs whose request does not
            say: ``"none"`` (default) or ``"loopback"`` (``127.0.0.1`` inside each
            run's own network namespace, for programs that serve and call themselves,
            as SandboxFusion's isolation tests do; never beyond).
        breakers: Circuit breakers per task type for ``/v1/score``, as
            :func:`execgym.ops.breakers.from_spec` reads them (``off`` turns them off).
            With ``broker`` Redis, the workers' own ``--breakers`` apply (shared in
            Redis); with Ray, these are the cluster board's.
        broker: Where ``/v1/score`` jobs are judged: ``embedded`` (this process's
            sandboxes), ``redis://HOST:PORT/DB`` (``execgym worker`` processes
            consuming that Redis) or ``ray`` / ``ray://HOST:PORT`` (sandbox actors on
            that Ray cluster). ``/run_code``, ``/v1/run`` and episodes are not
            affected (see ``episode_broker``).
        broker_prefix: The Redis key prefix of ``broker`` (the workers' ``--prefix``).

    Raises:
        ConfigError: if a number is not positive and finite, or a name is unknown.
    """

    token: str | None = None
    isolation: str = "bwrap"
    warm_pool: bool = True
    allow_root: bool = False
    workers: int = max(1, os.cpu_count() or 1)
    max_in_flight: int = 10_000
    max_body_bytes: int = 64 * MiB
    body_idle_timeout_s: float = 10.0
    min_body_rate_bytes_per_s: int = 16 * 1024
    header_timeout_s: float = 10.0
    allow_no_token: bool = False
    max_batch: int = 10_000
    job_ttl_s: float = 3600.0
    max_wall_time_s: float = 120.0
    max_memory_bytes: int = 4096 * MiB
    default_memory_bytes: int = 1024 * MiB
    readiness_ttl_s: float = 30.0
    pod_name: str | None = None
    breakers: str = DEFAULT_SPEC
    max_episodes: int = 64
    episode_idle_timeout_s: float = 300.0
    episode_tasks: str | None = None
    episode_broker: str | None = None
    episode_prefix: str = "execgym"
    episode_actor_cpus: float = 1.0
    run_code_network: str = "none"
    broker: str = "embedded"
    broker_prefix: str = "execgym"

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{field.name} must be positive and finite, got {value!r}")
        if self.token is not None and not self.token.strip():
            raise ConfigError("token must not be empty; leave it unset to turn auth off")
        if self.run_code_network not in ("none", "loopback"):
            raise ConfigError(
                f"run_code_network must be 'none' or 'loopback', got {self.run_code_network!r}"
            )
        from_spec(self.breakers)  # raises ConfigError for a bad spec
        broker = self.episode_broker
        if broker is not None and not _is_broker_url(broker):
            raise ConfigError(
                f"episode_broker {broker!r} is neither Redis nor Ray: give "
                "redis://HOST:PORT/DB (the Redis of the episode workers), 'ray' (the Ray "
                "cluster this host is part of) or ray://HOST:PORT, or leave it unset"
            )
        if self.broker != "embedded" and not _is_broker_url(self.broker):
            raise ConfigError(
                f"broker {self.broker!r} is not a broker: give embedded (score here), "
                "redis://HOST:PORT/DB (execgym worker processes on that Redis), 'ray' (the "
                "Ray cluster this host is part of) or ray://HOST:PORT"
            )
        if self.default_memory_bytes > self.max_memory_bytes:
            raise ConfigError("default_memory_bytes must not exceed max_memory_bytes")

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: object
    ) -> ServerSettings:
        """Settings from ``EXECGYM_SERVER_<FIELD>`` variables, then ``overrides``.

        Sizes accept units (``EXECGYM_SERVER_MAX_BODY_BYTES=16MiB``); booleans accept
        ``1/0/true/false/yes/no``. ``None`` overrides are ignored.

        Raises:
            ConfigError: for an unknown ``EXECGYM_SERVER_`` variable or a bad value.
        """
        environ = os.environ if environ is None else environ
        known = {field.name: field for field in fields(cls)}
        values: dict[str, object] = {}
        for key, text in environ.items():
            if not key.startswith(ENV_PREFIX):
                continue
            name = key[len(ENV_PREFIX) :].lower()
            if name not in known:
                raise ConfigError(f"unknown setting {key}; known: {sorted(known)}")
            values[name] = _parse(name, text, cls.__dataclass_fields__[name].default)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]


def _parse(name: str, text: str, default: object) -> object:
    try:
        if isinstance(default, bool):
            lowered = text.strip().lower()
            if lowered not in ("1", "0", "true", "false", "yes", "no"):
                raise ValueError(text)
            return lowered in ("1", "true", "yes")
        if name.endswith("_bytes"):
            return parse_size(text)
        if isinstance(default, int):
            return int(text)
        if isinstance(default, float):
            return float(text)
    except (ValueError, ConfigError) as error:
        raise ConfigError(f"{ENV_PREFIX}{name.upper()}={text!r}: {error}") from error
    return text


def _is_broker_url(url: str) -> bool:
    """Whether ``url`` names Redis or Ray."""
    return url == "ray" or url.startswith(("redis://", "rediss://", "unix://", "ray://"))
