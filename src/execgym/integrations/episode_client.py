"""An asyncio client of the service's episode endpoints, and an episode over it.

::

    async with EpisodeClient("http://execgym:8080", token=os.environ["EXECGYM_TOKEN"]) as client:
        env = client.env("repo/fix-median")        # the EpisodeEnv interface, over HTTP
        observation = await env.reset()
        observation, reward, terminated, truncated, info = await env.step(
            {"tool": "run_tests", "arguments": {}}
        )
        await env.aclose()

A full service (429) is retried (after its ``Retry-After``, at most 5 s) for up to
``max_wait_s``;
then :class:`~execgym.errors.CapacityExceeded` is raised. Other refusals raise
:class:`EpisodeServiceError` with the service's message (404 as
:class:`~execgym.errors.EpisodeNotFound`, 409 as :class:`~execgym.errors.EpisodeOver`).
Needs ``httpx`` (``pip install 'execgym[client]'``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from execgym.episodes.protocol import StepTuple
from execgym.errors import CapacityExceeded, EpisodeNotFound, EpisodeOver, Error

RETRY_POLL_S = 5.0
"""Longest pause between two tries of an open refused with 429."""

RETRIED_STATUSES = frozenset({None, 502, 503, 504})
"""A step that got these (``None``: no answer at all) is sent again, with its id."""


class EpisodeServiceError(Error):
    """The episode service refused a request or could not be reached.

    Attributes:
        status_code: The HTTP status (``None`` when the service was not reached).
    """

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class EpisodeClient:
    """Calls ``/v1/episodes`` of an ``execgym serve``; use as an async context manager.

    Args:
        base_url: The service, e.g. ``http://execgym:8080``.
        token: Its bearer token, if it has one.
        timeout_s: Seconds per request (a step runs a command: allow for it).
        max_wait_s: Seconds to keep retrying an open refused with 429.
        step_retries: Times a step whose answer was lost (no answer, 502, 503, 504: a
            replica behind the load balancer died) is sent again. Each step carries a
            ``request_id``, so the service answers a step it already ran with its
            outcome instead of running it twice.
        transport: An httpx transport (tests pass the app's ASGI transport).
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout_s: float = 600.0,
        max_wait_s: float = 300.0,
        step_retries: int = 3,
        transport: Any = None,
    ) -> None:
        try:
            import httpx
        except ImportError as error:  # pragma: no cover - depends on the extras
            raise ImportError(
                "the episode client needs httpx: pip install 'execgym[client]'"
            ) from error
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=headers, timeout=timeout_s, transport=transport
        )
        self._max_wait_s = max_wait_s
        self._step_retries = step_retries
        self.tools: list[dict[str, Any]] | None = None

    async def __aenter__(self) -> EpisodeClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connections (episodes live on until deleted or reclaimed)."""
        await self._http.aclose()

    async def _call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        import httpx

        try:
            response = await self._http.request(method, path, json=body)
        except httpx.HTTPError as error:
            raise EpisodeServiceError(f"{method} {path}: {error!r}") from error
        if response.is_success:
            return response.json()  # type: ignore[no-any-return]
        try:
            message = response.json().get("message") or response.text
        except ValueError:
            message = response.text
        if response.status_code == 429:
            retry = int(response.headers.get("Retry-After", "1"))
            raise CapacityExceeded(message, retry)
        if response.status_code == 404:
            raise EpisodeNotFound(message)
        if response.status_code == 409:
            raise EpisodeOver(message)
        raise EpisodeServiceError(
            f"{method} {path}: {response.status_code} {message}", response.status_code
        )

    async def open(
        self, task_id: str | None = None, *, task: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Open an episode: ``{episode_id, observation, tools}``.

        Raises:
            CapacityExceeded: if the service stays full for ``max_wait_s``.
            EpisodeServiceError: for a bad task or an unreachable service.
        """
        body = {"task_id": task_id} if task is None else {"task": dict(task)}
        deadline = time.monotonic() + self._max_wait_s
        while True:
            try:
                opened = await self._call("POST", "/v1/episodes", body)
            except CapacityExceeded as full:
                # Retry-After bounds the wait for an idle episode to be reclaimed; one
                # that ends frees its place sooner, so look again within a few seconds.
                wait_s = min(float(full.retry_after_s), RETRY_POLL_S)
                if time.monotonic() + wait_s > deadline:
                    raise
                await asyncio.sleep(wait_s)
                continue
            self.tools = opened["tools"]
            return opened

    async def step(self, episode_id: str, action: Mapping[str, Any]) -> StepTuple:
        """One action: ``(observation, reward, terminated, truncated, info)``.

        Sent again up to ``step_retries`` times when its answer is lost (the same
        ``request_id``: run once).

        Raises:
            EpisodeNotFound: if the episode is gone (deleted or reclaimed idle).
            EpisodeOver: if it has ended.
            EpisodeServiceError: refused, or no answer after the retries.
        """
        body = {"action": dict(action), "request_id": uuid.uuid4().hex}
        for attempt in itertools.count():
            try:
                result = await self._call("POST", f"/v1/episodes/{episode_id}/step", body)
                break
            except EpisodeServiceError as error:
                if attempt >= self._step_retries or error.status_code not in RETRIED_STATUSES:
                    raise
                await asyncio.sleep(min(0.5 * 2**attempt, RETRY_POLL_S))
        return (
            result["observation"],
            result["reward"],
            result["terminated"],
            result["truncated"],
            result["info"],
        )

    async def get(self, episode_id: str) -> dict[str, Any]:
        """The episode's state (``GET /v1/episodes/{id}``)."""
        return await self._call("GET", f"/v1/episodes/{episode_id}")

    async def delete(self, episode_id: str) -> dict[str, Any]:
        """Close the episode; its last state."""
        return await self._call("DELETE", f"/v1/episodes/{episode_id}")

    def env(
        self, task_id: str | None = None, *, task: Mapping[str, Any] | None = None
    ) -> RemoteEpisodeEnv:
        """An episode of this service with the ``EpisodeEnv`` interface (not opened yet)."""
        return RemoteEpisodeEnv(self, task_id, task=task)


class RemoteEpisodeEnv:
    """An episode on the service, driven like a local :class:`execgym.episodes.AsyncEnv`.

    ``reset`` opens it (closing one opened before), ``aclose`` deletes it.

    Attributes:
        episode_id: The service's id, once reset.
        tools: The tool schemas the service answered, once reset.
    """

    def __init__(
        self,
        client: EpisodeClient,
        task_id: str | None = None,
        *,
        task: Mapping[str, Any] | None = None,
    ) -> None:
        self._client = client
        self._task_id = task_id
        self._task = task
        self.episode_id: str | None = None
        self.tools: list[dict[str, Any]] = []

    async def reset(self) -> dict[str, Any]:
        """Open the episode on the service; its first observation."""
        await self.aclose()
        opened = await self._client.open(self._task_id, task=self._task)
        self.episode_id, self.tools = opened["episode_id"], opened["tools"]
        return opened["observation"]  # type: ignore[no-any-return]

    async def step(self, action: Mapping[str, Any]) -> StepTuple:
        """One action; see :meth:`EpisodeClient.step`."""
        if self.episode_id is None:
            raise EpisodeOver("call reset() before step()")
        return await self._client.step(self.episode_id, action)

    async def aclose(self) -> None:
        """Delete the episode on the service (a gone one is fine); idempotent."""
        episode_id, self.episode_id = self.episode_id, None
        if episode_id is not None:
            with contextlib.suppress(EpisodeNotFound):
                await self._client.delete(episode_id)
