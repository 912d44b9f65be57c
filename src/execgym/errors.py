"""Exceptions raised by execgym.

Only *our* failures are exceptions. What untrusted code does (crash, loop, exhaust
memory, fail tests) is reported as data: see :class:`execgym.Verdict` and
:class:`execgym.sandbox.Status`.

::

Error:
    ├── ConfigError             bad settings or limits; raised at start-up
    ├── CapacityExceeded        a service is full; retry after ``retry_after_s``
    ├── TaskError               a task, rollout or input file is invalid
    │   └── TaskNotFound        a data set or task id that does not exist
    └── SandboxError            the sandbox could not do its job
        ├── SandboxUnavailable  backend missing on this host (no bwrap, no user namespaces)
        └── SandboxSetupFailed  namespaces, mounts or cgroups could not be set up
"""

from __future__ import annotations


class Error(Exception):
    """Base class for every execgym failure. Catch this to catch them all."""


class ConfigError(Error):
    """Settings or limits are invalid; raised before any work starts."""


class CapacityExceeded(Error):
    """The HTTP service is full: accepting more work would pass its in-flight capacity.

    The service answers 429 with ``Retry-After``.

    Attributes:
        retry_after_s: Seconds after which a retry is likely to be accepted.
    """

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class TaskError(Error):
    """A task, a rollout or an input file is invalid; the message says how to fix it."""


class TaskNotFound(TaskError):
    """A data set name or task id that does not exist."""


class SandboxError(Error):
    """The sandbox failed; the submitted code may be perfectly fine."""


class SandboxUnavailable(SandboxError):
    """The requested backend cannot run on this host.

    Raised by :func:`execgym.sandbox.open_sandbox` when, for example, ``bwrap`` is not
    on PATH. The message says how to install or enable what is missing.
    """


class SandboxSetupFailed(SandboxError):
    """Namespaces, mounts or cgroups could not be set up for one run."""
