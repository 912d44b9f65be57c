"""The warm pool as a :class:`~execgym.sandbox.base.Sandbox`; see :mod:`execgym.sandbox.pool`."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import shutil
from collections.abc import Sequence
from typing import Any

from execgym.environments.model import Environment
from execgym.environments.mounts import run_env
from execgym.errors import SandboxSetupFailed, SandboxUnavailable, TaskError
from execgym.sandbox._paths import archive_files
from execgym.sandbox._results import sandbox_error
from execgym.sandbox._run import BASE_ENV, check_exec_size
from execgym.sandbox._trusted import trusted_program
from execgym.sandbox.base import BaseSandbox, RunRequest, RunResult
from execgym.sandbox.bwrap import (
    WORK_DIR,
    BubblewrapSandbox,
    ReadOnlyPath,
    default_read_only_paths,
    resolve_paths,
)
from execgym.sandbox.pool._control import ZygoteControl
from execgym.sandbox.pool._forked import ForkedRun, Job
from execgym.sandbox.pool._staging import Stager

log = logging.getLogger(__name__)

MAX_ENV_BYTES = 128 * 1024
"""The largest environment (as JSON, bytes) a pooled run takes: a run's header, its
environment included, is one message to the zygote, and Linux caps a Unix socket
message near 208 KiB (``net.core.wmem_default``)."""
_runs = itertools.count(1)


class WarmPoolSandbox(BaseSandbox):
    """Python runs forked from a warm zygote; each as isolated as a fresh bwrap sandbox.

    Use it as an async context manager (or call :meth:`aclose`): the zygote starts on
    first use and is killed, with everything it forked, on close or if execgym dies.

    Args:
        read_only_paths: Host directories exposed read-only, as for
            :class:`BubblewrapSandbox` (default: the interpreter's prefix).
        environment: The root file system the zygote and its runs see, as for
            :class:`BubblewrapSandbox`: one pool (one zygote, started with the
            environment's own Python) per environment.

    Raises:
        SandboxUnavailable: if bwrap, or the seccomp filter, is not available.
    """

    name = "bwrap"

    def __init__(
        self,
        *,
        read_only_paths: Sequence[ReadOnlyPath] | None = None,
        environment: Environment | None = None,
    ) -> None:
        self._fresh = BubblewrapSandbox(read_only_paths=read_only_paths, environment=environment)
        self.environment = self._fresh.environment
        self._settings: dict[str, Any] = {"read_only_paths": read_only_paths}
        found = shutil.which("bwrap")
        if found is None:  # BubblewrapSandbox() above would have raised already
            raise SandboxUnavailable("bubblewrap (bwrap) is not installed")
        if self.environment is None:
            paths = default_read_only_paths() if read_only_paths is None else read_only_paths
        else:
            paths = read_only_paths or []
        self._zygote = ZygoteControl(found, resolve_paths(paths), self.environment)
        self._stager = Stager(self._zygote, lambda: next(_runs))
        self._lock = asyncio.Lock()

    def with_environment(self, environment: Environment | None) -> WarmPoolSandbox:
        """The same tier, with the same settings, running in ``environment`` instead."""
        return WarmPoolSandbox(**self._settings, environment=environment)

    async def __aenter__(self) -> WarmPoolSandbox:
        """Start the zygote now (see :meth:`start`); leaving the block closes the pool."""
        await self.start()
        return self

    async def start(self) -> None:
        """Start the zygote if it is not running.

        Raises:
            SandboxSetupFailed: if it does not come up within 10 s (the message has its
                error output).
        """
        async with self._lock:
            if self._zygote.running():
                return
            if self._zygote.proc is not None:  # it died: fail what it had, free what it held
                self._zygote.broken("the warm pool's zygote exited")
                log.warning("warm pool zygote exited: %s", self._stop()[-2000:])
            await self._zygote.start()
            self._stager.replenish()
            if self._stager.making is not None:  # the first runs find their inits staged
                with contextlib.suppress(Exception):
                    await self._stager.making

    def _stop(self) -> str:
        """Kill the zygote and its runs, drop the staged inits; the zygote's errors."""
        errors = self._zygote.stop()
        self._stager.drop()  # the zygote, and the inits it staged, are gone
        return errors

    async def aclose(self) -> None:
        """Kill the zygote and every run it forked; idempotent."""
        self._zygote.broken("the warm pool was closed")
        self._stop()
        await self._stager.aclose()

    async def run(self, request: RunRequest) -> RunResult:
        """Run ``request``: Python forked from the warm zygote, others in fresh bwrap.

        See :meth:`Sandbox.run`.

        Raises:
            TaskError: if an environment entry is over Linux's 128 KiB, or the whole
                environment over :data:`MAX_ENV_BYTES` (it travels in one message to
                the zygote).
        """
        if request.python_source is None:
            return await self._fresh.run(request)
        limits = request.limits
        archive = archive_files(request.files)
        full_env = {**run_env(self.environment, BASE_ENV), "HOME": WORK_DIR, "TMPDIR": "/tmp"}
        full_env.update(request.env)
        check_exec_size(["python"], full_env)
        size = len(json.dumps(full_env))
        if size > MAX_ENV_BYTES:
            raise TaskError(
                f"the environment takes {size} bytes; the warm pool passes at most "
                f"{MAX_ENV_BYTES}: pass large data as a file, or run without the warm pool"
            )
        try:
            await self.start()
        except SandboxSetupFailed as error:
            return sandbox_error(self.name, str(error))
        try:
            slot, cgroup = self._stager.take(limits)
        except OSError as error:
            return sandbox_error(self.name, f"could not create the run's cgroup: {error}")
        try:
            job = Job(
                source=request.python_source,
                stdin=request.stdin,
                archive=archive,
                limits=limits,
                env=full_env,
                want_report=request.want_report,
                program=self._zygote.preload(trusted_program(request.python_source)),
            )
            forked = ForkedRun(
                self._zygote,
                next(_runs),
                job,
                cgroup,
                slot,
                self._fresh.enforcement(limits),
                on_sent=self._stager.replenish,
            )
            return await forked.run()
        except (OSError, SandboxSetupFailed) as error:
            return sandbox_error(self.name, f"the warm pool could not run it: {error}")
        finally:
            if cgroup is not None:
                cgroup.remove_soon()
