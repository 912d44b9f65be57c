"""The warm pool: a fork server inside one bwrap sandbox, so rollouts skip start-up.

A rollout in a fresh sandbox pays for ``bwrap`` and for starting the Python interpreter
(about 20 ms here). :class:`WarmPoolSandbox` starts one zygote ahead of time: a Python
interpreter inside a bwrap sandbox that has already imported the modules rollouts
commonly use. For each Python run it forks a child which gets, before any untrusted
code exists in it, everything a fresh bwrap sandbox gives: its own cgroup (memory,
processes, CPU), new mount, PID, network (or a reused one verified to hold no socket),
IPC and UTS namespaces, a private tmpfs ``/work`` and ``/tmp``, a fresh ``/proc`` and
``/dev/pts``, as root a host uid no other live run has (from a block of uids the pool
leases, see :mod:`execgym.sandbox._uids`; as an ordinary user uid 0 of the pool's user
namespace, i.e. yours) with no capabilities,
``no_new_privs``, the same seccomp filter, and only the run's own descriptors. The
zygote never runs user code and never reads a job's contents (they travel in
descriptors it only hands on), so one rollout cannot see another's. See
:mod:`execgym.guest.zygote` for the child's steps.

Non-Python programs (``RunRequest(argv=...)``) go to a plain :class:`BubblewrapSandbox`.

The host side, a module per concern:

- :mod:`.sandbox`: :class:`WarmPoolSandbox`, the :class:`~execgym.sandbox.base.Sandbox`.
- :mod:`._control`: the zygote's process and control socket.
- :mod:`._staging`: inits staged in their cgroups ahead of the runs.
- :mod:`._forked`: one forked run, step by step.

>>> async with WarmPoolSandbox() as box:                          # doctest: +SKIP
...     result = await box.run_python(b"print('hi')")
"""

from __future__ import annotations

from execgym.sandbox.pool.sandbox import MAX_ENV_BYTES, WarmPoolSandbox

__all__ = ["MAX_ENV_BYTES", "WarmPoolSandbox"]
