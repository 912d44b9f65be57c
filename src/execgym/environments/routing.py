"""Which environment a task runs in, and one sandbox per environment.

A task names its environment in ``"environment"``: nothing or ``"host"`` (the host's
file system, as before), a name or digest in the local cache, or an inline spec (a JSON
object: ``{"base": ..., "pip": [...], "setup": [...]}``, built once and cached by its
digest). :func:`resolve` finds it, pulling it from the object store when the local
cache lacks it and a store is configured (so a worker node fetches a built environment
instead of building it again). :class:`EnvironmentSandboxes` keeps one sandbox per
environment, of the same tier and settings as the batch's own sandbox
(``sandbox.with_environment(env)``): one warm pool (one zygote) per environment, one
prestarter per environment.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from typing import Any

from execgym.environments.cache import EnvironmentCache, EnvironmentNotFound
from execgym.environments.model import HOST, HOST_NAME, Environment
from execgym.errors import ConfigError

EnvironmentRef = str | Mapping[str, Any] | None
"""What a task's ``environment`` holds: ``None``/``"host"``, a name or digest, or a spec."""


def resolve(
    reference: EnvironmentRef,
    cache: EnvironmentCache | None = None,
    store: Any = None,
) -> Environment:
    """The environment ``reference`` names (see the module docstring).

    Args:
        reference: ``None``, ``"host"``, a name or digest, or a spec mapping.
        cache: The local cache (default: :class:`EnvironmentCache`'s default).
        store: A :class:`~execgym.storage.Store` to pull a missing named environment
            from (``NAME[@VERSION]`` as pushed by ``execgym env push``); ``None``: local only.

    Raises:
        EnvironmentNotFound: Not in the cache (nor in the store).
        ValueError: A spec that does not validate.
        BuildFailed: A spec's build failed.
    """
    if reference is None or reference == HOST_NAME:
        return HOST
    cache = cache or EnvironmentCache()
    if not isinstance(reference, str):
        from execgym.environments.spec import EnvironmentSpec, build

        return build(EnvironmentSpec.model_validate(dict(reference)), cache).environment
    try:
        return cache.get(reference)
    except EnvironmentNotFound:
        if store is None:
            raise
    from execgym.environments.remote import pull
    from execgym.errors import ArtifactNotFound

    try:
        return pull(store, reference, cache)
    except ArtifactNotFound as error:
        raise EnvironmentNotFound(
            f"no environment {reference!r} in {cache.root} nor in {store.url}: import, "
            "build or push it first"
        ) from error


def default_store() -> Any:
    """The store named by ``$EXECGYM_STORE`` (environments are pulled from it), or ``None``."""
    import os

    if not os.environ.get("EXECGYM_STORE"):
        return None
    from execgym.storage import open_store

    return open_store()


def with_environment(sandbox: Any, environment: Environment) -> Any:
    """``sandbox``'s tier and settings, running in ``environment``.

    A wrapper (:class:`~execgym.sandbox.base.SandboxWrapper`: bounds, metering) is
    copied around its inner sandbox's counterpart, sharing its state.

    Raises:
        ConfigError: The tier cannot run an environment (``none`` runs on the host).
    """
    if environment.is_host:
        return sandbox
    inner = getattr(sandbox, "inner", None)
    if inner is not None and not hasattr(sandbox, "with_environment"):
        wrapped = copy.copy(sandbox)
        wrapped.inner = with_environment(inner, environment)
        return wrapped
    make = getattr(sandbox, "with_environment", None)
    if make is None:
        raise ConfigError(
            f"the {getattr(sandbox, 'name', type(sandbox).__name__)} sandbox cannot run a task "
            "in an environment (it runs on the host's file system): use --isolation bwrap "
            "or gvisor"
        )
    return make(environment)


class EnvironmentSandboxes:
    """One sandbox per environment, made on first use from ``base``.

    Args:
        base: The batch's sandbox (host environment); its tier and settings are reused.
        cache: The local environment cache (default: the default cache).
        store: An object store to pull missing environments from, or ``None``.
    """

    def __init__(self, base: Any, cache: EnvironmentCache | None = None, store: Any = None):
        self.base = base
        self.cache = cache
        self.store = store
        self._by_reference: dict[str, Any] = {}
        self._by_digest: dict[str, Any] = {}
        self._lock = asyncio.Lock()

    async def sandbox_for(self, reference: EnvironmentRef) -> Any:
        """The sandbox for tasks naming ``reference`` (resolved, pulled or built once).

        Raises:
            As :func:`resolve` and :func:`with_environment`.
        """
        if reference is None or reference == HOST_NAME:
            return self.base
        key = reference if isinstance(reference, str) else repr(sorted(dict(reference).items()))
        found = self._by_reference.get(key)
        if found is not None:
            return found
        async with self._lock:
            if key not in self._by_reference:
                environment = await asyncio.to_thread(resolve, reference, self.cache, self.store)
                sandbox = self._by_digest.get(environment.digest)
                if sandbox is None:
                    sandbox = with_environment(self.base, environment)
                    self._by_digest[environment.digest] = sandbox
                self._by_reference[key] = sandbox
            return self._by_reference[key]

    async def aclose(self) -> None:
        """Close every sandbox made here (warm pools, prestarters), not ``base``."""
        for sandbox in self._by_digest.values():
            close = getattr(sandbox, "aclose", None)
            if close is not None:
                await close()
        self._by_digest.clear()
        self._by_reference.clear()
