"""The FastAPI app factory: ``create_app(settings)``; there is no module-level app.

Run it with ``execgym serve``, or with any ASGI server::

    uvicorn --factory 'execgym.server.app:app_from_env'
"""

from __future__ import annotations

import logging
import math
import socket
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import HTTPException, RequestValidationError
from fastapi.responses import JSONResponse

from execgym._version import __version__
from execgym.episodes.protocol import (
    EpisodeEnv,
    ShippedTasks,
    local_env_factory,
    tool_schemas,
)
from execgym.episodes.registry import EpisodeRegistry, Episodes
from execgym.errors import ConfigError, Error, TaskError
from execgym.ops.breakers import from_spec
from execgym.ops.metrics import MeteredSandbox
from execgym.sandbox import open_sandbox
from execgym.sandbox.base import Sandbox
from execgym.sandbox.bwrap import interpreter_paths
from execgym.scoring import ScoredRollout
from execgym.server.capacity import BoundedSandbox, Capacity
from execgym.server.episode_routes import EpisodeBackend, episodes
from execgym.server.jobs import BrokerJobRunner, EmbeddedJobRunner, JobRunner
from execgym.server.languages import Toolchains, find_toolchains
from execgym.server.metrics import Metrics
from execgym.server.middleware import BodyLimit, RequestMetrics
from execgym.server.openenv import openenv
from execgym.server.openenv_ws import openenv_info, openenv_public
from execgym.server.routes import api, health
from execgym.server.service import Service
from execgym.server.settings import ServerSettings
from execgym.server.status import StatusBoard

log = logging.getLogger(__name__)


def build_sandbox(settings: ServerSettings, toolchains: Toolchains) -> Sandbox:
    """The sandbox backend ``settings`` asks for, seeing the toolchains read-only.

    Raises:
        SandboxUnavailable: if the backend cannot run here (the message says how to fix).
        ConfigError: for an unknown backend name.
    """
    return open_sandbox(
        settings.isolation,
        warm_pool=settings.warm_pool,
        read_only_paths=[*interpreter_paths(), *toolchains.read_only_paths],
        allow_root=settings.allow_root,
    )


def _error(status: int, error: str, message: str, **extra: object) -> JSONResponse:
    return JSONResponse({"error": error, "message": message, **extra}, status_code=status)


def _install_error_handlers(app: FastAPI, metrics: Metrics) -> None:
    @app.exception_handler(Error)
    async def execgym_error(request: Request, error: Error) -> JSONResponse:
        """Our errors by kind: full is 429, bad input 422, another failure of ours 503.

        "Full" is any error with ``retry_after_s``: our capacity, a broker's full queue.
        """
        retry_after_s = getattr(error, "retry_after_s", None)
        if retry_after_s is not None:
            metrics.rejected.inc()
            response = _error(429, "at_capacity", str(error))
            response.headers["Retry-After"] = str(max(1, math.ceil(retry_after_s)))
            return response
        if isinstance(error, TaskError | ConfigError):
            return _error(422, "invalid_request", str(error))
        error_id = uuid.uuid4().hex[:12]
        log.error("request_failed error_id=%s path=%s: %s", error_id, request.url.path, error)
        return _error(503, "unavailable", str(error), error_id=error_id)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        problems = [
            f"{'.'.join(str(part) for part in item['loc'])}: {item['msg']}"
            for item in error.errors()
        ]
        hint = ""
        if not request.headers.get("content-type", "").startswith("application/json"):
            hint = " (send the body as JSON with 'Content-Type: application/json')"
        fields = [
            {"loc": list(item["loc"]), "msg": item["msg"], "type": item["type"]}
            for item in error.errors()
        ]
        return _error(422, "invalid_request", "; ".join(problems) + hint, detail=fields)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        response = _error(error.status_code, f"http_{error.status_code}", str(error.detail))
        for name, value in (error.headers or {}).items():
            response.headers[name] = value
        return response

    @app.exception_handler(Exception)
    async def internal(request: Request, error: Exception) -> JSONResponse:
        error_id = uuid.uuid4().hex[:12]
        log.exception("request_failed error_id=%s path=%s", error_id, request.url.path)
        return _error(
            500, "internal", "internal error; give this error_id to the operator", error_id=error_id
        )


def create_app(
    settings: ServerSettings | None = None,
    *,
    sandbox: Sandbox | None = None,
    toolchains: Toolchains | None = None,
    jobs: Callable[[Sandbox, Capacity], JobRunner] | None = None,
    episodes_backend: EpisodeBackend | None = None,
) -> FastAPI:
    """Build the HTTP service.

    Args:
        settings: How to run; :meth:`ServerSettings.from_env` when omitted.
        sandbox: Where programs run (tests pass a fake); built from ``settings`` by
            default.
        toolchains: Host compilers and interpreters; looked up on ``PATH`` by default.
        jobs: Builds the job runner from the bounded sandbox and the shared capacity;
            by default :class:`BrokerJobRunner` on ``settings.broker`` when it is one,
            else :class:`EmbeddedJobRunner`.
        episodes_backend: The agent episodes behind ``/v1/episodes`` and OpenEnv's
            ``/reset`` and ``/step`` (tests pass fakes); by default
            :mod:`execgym.episodes` in this process, on the shipped example tasks and
            ``settings.episode_tasks``.

    Raises:
        SandboxUnavailable: if the sandbox backend cannot run on this host.
    """
    settings = settings or ServerSettings.from_env()
    toolchains = toolchains or find_toolchains()
    capacity = Capacity(settings.max_in_flight, settings.workers)
    metrics = Metrics(capacity)
    inner = sandbox or build_sandbox(settings, toolchains)
    bounded = BoundedSandbox(MeteredSandbox(inner, metrics), settings.workers)
    breakers = from_spec(settings.breakers)
    if breakers is not None:
        metrics.watch(breakers)
    board = StatusBoard(
        metrics, capacity, breakers, worker=settings.pod_name or socket.gethostname()
    )

    def count(result: ScoredRollout) -> None:
        metrics.rollouts.labels(result.verdict.value).inc()
        board.record(result)

    runner: JobRunner
    if jobs is not None:
        runner = jobs(bounded, capacity)
    elif settings.broker != "embedded":
        runner = BrokerJobRunner(
            open_job_broker(settings),
            capacity,
            ttl_s=settings.job_ttl_s,
            on_result=count,
            metrics=metrics,
        )
        board.shared = runner
    else:
        runner = EmbeddedJobRunner(
            bounded,
            capacity,
            workers=settings.workers,
            ttl_s=settings.job_ttl_s,
            on_result=count,
            breakers=breakers,
            metrics=metrics,
        )
    service = Service(settings, bounded, toolchains, capacity, runner, metrics)
    service.status = board
    episode_backend = episodes_backend or default_episodes(settings)
    count_episodes(metrics, episode_backend.registry)
    board.episodes = episode_backend.registry

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            async with board.heartbeating():
                yield
        finally:
            await episode_backend.registry.aclose()
            await runner.aclose()
            await bounded.aclose()

    app = FastAPI(
        title="execgym",
        version=__version__,
        description="Run model-written code in isolated sandboxes and score it. "
        "`/run_code` and `/v1/ping` are SandboxFusion-compatible.",
        lifespan=lifespan,
    )
    app.state.service = service
    app.state.episodes = episode_backend
    app.include_router(health)
    app.include_router(api)
    app.include_router(episodes)
    app.include_router(openenv)
    app.include_router(openenv_public)
    app.include_router(openenv_info)
    _install_error_handlers(app, metrics)
    app.add_middleware(
        BodyLimit,
        max_bytes=settings.max_body_bytes,
        token=settings.token,
        idle_timeout_s=settings.body_idle_timeout_s,
        min_rate_bytes_per_s=settings.min_body_rate_bytes_per_s,
        max_batch=settings.max_batch,
    )
    app.add_middleware(RequestMetrics, metrics=metrics)
    return app


def open_job_broker(settings: ServerSettings) -> Any:
    """The broker ``/v1/score`` jobs go through (``settings.broker``, not ``embedded``).

    Redis: the queue ``execgym worker`` processes consume (their reward, breakers and
    sandboxes apply). Ray: sandbox actors started on the cluster at the first job,
    with this service's isolation and ``breakers`` (one board for the cluster).

    Raises:
        BrokerUnavailable: for a Redis URL that cannot be used.
        ConfigError: Ray is not installed.
    """
    url = settings.broker
    if url == "ray" or url.startswith("ray://"):
        from execgym.broker.ray_actors import ActorConfig
        from execgym.broker.ray_broker import RayBroker

        breakers = from_spec(settings.breakers)
        config = ActorConfig(
            isolation=settings.isolation,
            warm_pool=settings.warm_pool,
            allow_root=settings.allow_root,
            breaker_key=(breakers.key_name or "dataset") if breakers is not None else "dataset",
        )
        policy = breakers.policy if breakers is not None else None
        return RayBroker(url, config, breakers=policy)
    from execgym.broker import open_broker

    return open_broker(url, prefix=settings.broker_prefix)


def count_episodes(metrics: Metrics, registry: Episodes) -> None:
    """Export ``registry``'s episodes at each scrape (names: :mod:`execgym.ops.metrics`)."""
    metrics.watch_episodes(registry)


def default_episodes(settings: ServerSettings) -> EpisodeBackend:
    """Episodes of :mod:`execgym.episodes` in this process, bounded by ``settings``.

    With ``settings.episode_broker``, episodes are held by episode workers through
    Redis (:class:`~execgym.broker.episode_router.RoutedEpisodes`) or by Ray actors
    (:class:`~execgym.broker.ray_episodes.RayEpisodes`) instead, and this process
    keeps none. The episode package is imported on the first episode, not
    here, so the rest of the service runs without it.
    """
    catalog = ShippedTasks(*([settings.episode_tasks] if settings.episode_tasks else []))
    broker = settings.episode_broker
    if broker is not None and (broker == "ray" or broker.startswith("ray://")):
        from execgym.broker.ray_episodes import RayEpisodes

        on_ray = RayEpisodes(
            broker,
            max_episodes=settings.max_episodes,
            cpus_per_actor=settings.episode_actor_cpus,
            idle_timeout_s=settings.episode_idle_timeout_s,
        )
        return EpisodeBackend(on_ray, catalog, tool_schemas)
    if broker is not None:
        from execgym.broker.episode_router import RoutedEpisodes

        routed = RoutedEpisodes(broker, prefix=settings.episode_prefix)
        return EpisodeBackend(routed, catalog, tool_schemas)

    def build(task: object) -> EpisodeEnv:
        return local_env_factory()(task)

    registry = EpisodeRegistry(
        build, max_episodes=settings.max_episodes, idle_timeout_s=settings.episode_idle_timeout_s
    )
    return EpisodeBackend(registry, catalog, tool_schemas)


def app_from_env() -> FastAPI:
    """``create_app`` with settings from ``EXECGYM_SERVER_*`` (for ``uvicorn --factory``)."""
    return create_app(ServerSettings.from_env())
