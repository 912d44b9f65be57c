"""A host uid of its own for every run, when execgym runs as root.

The kernel keeps some limits per *user*, not per process or namespace: descriptors in
flight on Unix sockets (``user->unix_inflight``, checked against the sender's
``RLIMIT_NOFILE``: past it ``sendmsg`` fails with ``ETOOMANYREFS``), inotify instances
and watches (``fs.inotify.max_user_instances``), ``RLIMIT_NPROC``, message queues, and
who may open which pty. When every run was host uid 65534, one run that used them up
made a concurrent run fail (issue 18). As root, execgym therefore gives each run a
host uid (and gid) no other live run has, from a range no account uses:

- The range is ``EXECGYM_SANDBOX_UIDS`` (``first:count``), by default
  :data:`DEFAULT_RANGE`: 4 Mi uids from 2113929216 (``0x7e000000``), inside what
  systemd's "Users, Groups, UIDs and GIDs on systemd Systems" leaves unused
  (1879048192-2147352575: above the ranges ``systemd-nspawn`` picks from, below the
  upper half that some tools read as negative).
- It is cut into blocks of :data:`BLOCK_SIZE` uids. Each process that runs sandboxes
  (and each warm pool's zygote) leases one block for its lifetime with an exclusive
  ``flock`` on ``/run/execgym/uid-blocks/<n>.lock``: the kernel drops the lock when the
  process dies, so two workers on one host never share a block and nothing needs
  cleaning up.
- Inside a block, :meth:`UidBlock.take` hands out the next uid no run of this process
  holds (round robin, so a uid is reused as late as possible) and
  :meth:`UidBlock.give` returns it when the run's processes are all gone.

As an ordinary user there is no other host uid to give (a user namespace maps only
your own), so :func:`process_block` is ``None`` and every run is your uid: ptys and
abstract sockets are still private per run (their own ``devpts`` and network
namespace), but the per-user limits above are shared by all your runs. See SECURITY.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_RANGE = (0x7E000000, 1 << 22)
"""``(first uid, count)`` of the uids runs get as root, unless ``EXECGYM_SANDBOX_UIDS``."""

BLOCK_SIZE = 8192
"""Uids per leased block: the most runs one process can hold at once with uids of
their own (past it a run shares the uid of the oldest one still running)."""

LOCK_DIR = Path("/run/execgym/uid-blocks")


def uid_range() -> tuple[int, int]:
    """``(first, count)`` from ``EXECGYM_SANDBOX_UIDS`` (``first:count``), or the default.

    Raises:
        ValueError: if the variable is malformed, holds fewer than :data:`BLOCK_SIZE`
            uids, or reaches uid 65535 or below, or 2**31 and above.
    """
    text = os.environ.get("EXECGYM_SANDBOX_UIDS")
    if not text:
        return DEFAULT_RANGE
    try:
        first_text, count_text = text.split(":")
        first, count = int(first_text), int(count_text)
    except ValueError:
        raise ValueError(
            f"EXECGYM_SANDBOX_UIDS={text!r} is not FIRST:COUNT (e.g. 2113929216:4194304)"
        ) from None
    if count < BLOCK_SIZE or first <= 65535 or first + count > 1 << 31:
        raise ValueError(
            f"EXECGYM_SANDBOX_UIDS={text!r}: needs at least {BLOCK_SIZE} uids, all above "
            "65535 and below 2147483648, that no account uses"
        )
    return first, count


class UidBlock:
    """A block of host uids leased by this process; hands one to each run (thread-safe).

    Args:
        first: The block's first uid.
        size: How many uids it holds.
        lock_fd: The descriptor holding the block's ``flock`` (kept open for as long as
            the block is used; ``-1`` for none).
    """

    def __init__(self, first: int, size: int, lock_fd: int = -1) -> None:
        self.first = first
        self.size = size
        self._lock_fd = lock_fd
        self._next = 0
        self._held: dict[int, int] = {}  # uid -> runs holding it (1, past BLOCK_SIZE more)
        self._mutex = threading.Lock()

    @classmethod
    def lease(cls) -> UidBlock | None:
        """Lease a free block of the range for this process's life; ``None`` if none is.

        Raises:
            ValueError: if ``EXECGYM_SANDBOX_UIDS`` is malformed.
        """
        first, count = uid_range()
        try:
            LOCK_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as error:
            log.warning("cannot lease sandbox uids (%s): runs share uid 65534", error)
            return None
        for index in range(count // BLOCK_SIZE):
            path = LOCK_DIR / f"{first + index * BLOCK_SIZE}.lock"
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            return cls(first + index * BLOCK_SIZE, BLOCK_SIZE, fd)
        log.warning("every block of sandbox uids is leased: runs share uid 65534")
        return None

    def take(self) -> int:
        """A uid no other run of this block holds (the least held one, if all are)."""
        with self._mutex:
            for _ in range(self.size):
                uid = self.first + self._next
                self._next = (self._next + 1) % self.size
                if uid not in self._held:
                    self._held[uid] = 1
                    return uid
            uid = min(self._held, key=self._held.__getitem__)
            self._held[uid] += 1
            return uid

    def give(self, uid: int) -> None:
        """Return ``uid`` (its run's processes are all gone); unknown uids are ignored."""
        with self._mutex:
            held = self._held.get(uid, 0)
            if held <= 1:
                self._held.pop(uid, None)
            else:
                self._held[uid] = held - 1

    def release(self) -> None:
        """Give the whole block back to the host (its runs must all have ended)."""
        if self._lock_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)
            self._lock_fd = -1


_process_block: tuple[int, UidBlock | None] | None = None
_process_mutex = threading.Lock()


def process_block() -> UidBlock | None:
    """The block this process's fresh sandboxes take run uids from (leased on first use).

    ``None`` when not root (see the module docstring) or when no block is free. A forked
    child leases a block of its own (the ``flock`` is shared with its parent).
    """
    global _process_block
    if os.geteuid() != 0:
        return None
    with _process_mutex:
        if _process_block is None or _process_block[0] != os.getpid():
            _process_block = (os.getpid(), UidBlock.lease())
        return _process_block[1]
