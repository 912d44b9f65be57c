"""Exceptions raised by execgym.

Only *our* failures are exceptions. What untrusted code does (crash, loop, exhaust
memory, fail tests) is reported as data: see :class:`execgym.Verdict` and
:class:`execgym.sandbox.Status`.

::

Error:
    ├── ConfigError             bad settings or limits; raised at start-up
    ├── CapacityExceeded        a service is full; retry after ``retry_after_s``
    ├── EpisodeError            an agent episode cannot do what was asked
    │   ├── EpisodeNotFound     no such episode: never opened, deleted, or reclaimed
    │   └── EpisodeOver         the episode has ended; open a new one
    ├── TaskError               a task, rollout or input file is invalid
    │   ├── TaskNotFound        a data set or task id that does not exist
    │   └── DamagedInput        a compressed input file ends early or is corrupt
    ├── SandboxError            the sandbox could not do its job
    │   ├── SandboxUnavailable  backend missing on this host (no bwrap, no user namespaces)
    │   └── SandboxSetupFailed  namespaces, mounts or cgroups could not be set up
    └── BrokerError             the job queue could not do its job
        ├── BrokerUnavailable   the queue's service (Redis) cannot be reached
        ├── QueueFull           the queue is at its bound: back off and retry later
        ├── JobsLost            the broker lost jobs of a batch, more often than allowed
        └── MessageError        a job or result message on the queue is malformed
    └── StorageError            the object store (execgym.storage) could not do its job
        ├── StorageUnavailable  the store cannot be reached or its backend is not installed
        ├── ArtifactNotFound    no such data set, version, blob, log or checkpoint
        ├── AmbiguousVersion    a version prefix that matches more than one version
        └── StorageCorruptionError  an object's bytes do not match its hash
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


class EpisodeError(Error):
    """An agent episode (``POST /v1/episodes``) cannot do what was asked."""


class EpisodeNotFound(EpisodeError):
    """No episode has this id: it was never opened, was deleted, or was reclaimed idle.

    The HTTP service answers 404.
    """


class EpisodeOver(EpisodeError):
    """The episode has ended (submitted, or out of budget): it takes no more steps.

    The HTTP service answers 409; read its final reward with ``GET``, then open a new one.
    """


class TaskError(Error):
    """A task, a rollout or an input file is invalid; the message says how to fix it."""


class TaskNotFound(TaskError):
    """A data set name or task id that does not exist."""


class DamagedInput(TaskError):
    """A compressed input file (``.gz``) ends before its end marker, or is corrupt.

    Raised by :func:`execgym.tasks.read_jsonl` (and the loaders built on it) *after*
    every complete line before the damage has been yielded, so nothing readable is
    lost; ``execgym score`` scores those lines, then reports this and exits 3.

    Attributes:
        path: The file.
        lines_read: Complete lines read before the damage.
    """

    def __init__(self, message: str, path: str, lines_read: int) -> None:
        super().__init__(message)
        self.path = path
        self.lines_read = lines_read


class SandboxError(Error):
    """The sandbox failed; the submitted code may be perfectly fine."""


class SandboxUnavailable(SandboxError):
    """The requested backend cannot run on this host.

    Raised by :func:`execgym.sandbox.open_sandbox` when, for example, ``bwrap`` is not
    on PATH. The message says how to install or enable what is missing.
    """


class SandboxSetupFailed(SandboxError):
    """Namespaces, mounts or cgroups could not be set up for one run."""


class BrokerError(Error):
    """The job queue (:mod:`execgym.broker`) failed; the jobs themselves may be fine."""


class BrokerUnavailable(BrokerError):
    """The broker's service cannot be reached (Redis down, wrong URL, refused auth).

    The message names the URL (without its password) and how to check it.
    """


class QueueFull(BrokerError):
    """The queue holds as many jobs as it is allowed to; nothing of the batch was queued.

    Raised by ``Broker.submit(..., wait=False)`` and when a waiting submit runs out of
    time. An HTTP front end answers 429 with ``Retry-After: ceil(retry_after_s)``.

    Attributes:
        retry_after_s: A hint: seconds after which a retry is likely to fit.
        queued: Jobs waiting or running when the batch was refused.
        max_queue_length: The queue's bound.
    """

    def __init__(self, message: str, *, retry_after_s: float, queued: int, max_queue_length: int):
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.queued = queued
        self.max_queue_length = max_queue_length


class JobsLost(BrokerError):
    """The broker lost jobs of a batch (neither queued, running nor done) too often.

    A Redis restarted without persistence (or flushed, or failed over to an empty
    replica) forgets every job; :func:`execgym.broker.score_jobs` sees that, resubmits
    the lost jobs, and raises this once a job has been lost more than
    ``max_resubmits`` times, instead of waiting forever.

    Attributes:
        batch_id: The batch.
        lost: Jobs lost this time.
        total: Jobs in the batch.
    """

    def __init__(self, message: str, *, batch_id: str, lost: int, total: int) -> None:
        super().__init__(message)
        self.batch_id = batch_id
        self.lost = lost
        self.total = total


class MessageError(BrokerError):
    """A message on the queue is not a valid job or result (wrong version, bad fields)."""


class StorageError(Error):
    """The object store (:mod:`execgym.storage`) failed; the data may be fine elsewhere.

    Attributes:
        store: The store's URL, without any password.
    """

    def __init__(self, message: str, *, store: str) -> None:
        super().__init__(message)
        self.store = store


class StorageUnavailable(StorageError):
    """The store cannot be reached, or its backend library is missing.

    For example: refused connection, wrong permissions, no such bucket, or no ``s3fs``
    for ``s3://``. The message says how to fix it.
    """


class ArtifactNotFound(StorageError):
    """A data set name, version, blob, batch log or checkpoint that the store does not hold.

    Attributes:
        key: What was looked up, e.g. ``"humaneval@3fa2"`` or a blob's hash.
    """

    def __init__(self, message: str, *, store: str, key: str) -> None:
        super().__init__(message, store=store)
        self.key = key


class AmbiguousVersion(StorageError):
    """A version prefix (``NAME@3fa2``) that matches more than one version of a data set.

    Attributes:
        candidates: The full versions it matches.
    """

    def __init__(self, message: str, *, store: str, candidates: tuple[str, ...]) -> None:
        super().__init__(message, store=store)
        self.candidates = candidates


class StorageCorruptionError(StorageError):
    """An object read back does not match its hash, or a record of the store is invalid.

    Raised on every read of a blob or manifest whose bytes changed after it was written
    (bit rot, a partial copy, tampering). Nothing is returned or written from it.

    Attributes:
        key: The object's key in the store, e.g. ``blobs/ab/cdef...``.
        expected_sha256: The hash it is stored under (None for a record, such as a
            version's ref, that is not content-addressed but does not parse).
        actual_sha256: The hash of the bytes read (None as for ``expected_sha256``).
    """

    def __init__(
        self,
        message: str,
        *,
        store: str,
        key: str,
        expected_sha256: str | None = None,
        actual_sha256: str | None = None,
    ) -> None:
        super().__init__(message, store=store)
        self.key = key
        self.expected_sha256 = expected_sha256
        self.actual_sha256 = actual_sha256
