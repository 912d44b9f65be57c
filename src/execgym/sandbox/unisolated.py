"""No isolation at all: for development machines without bubblewrap. Opt-in only.

Programs run as the caller, with the caller's file system and network; only the
limits are applied (cgroup where writable, rlimits otherwise). Every result says
``isolation: "none"`` and a warning is logged when the backend is created.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from execgym.errors import SandboxUnavailable
from execgym.sandbox._cgroup import detect_cgroups
from execgym.sandbox._paths import safe_relative
from execgym.sandbox._python import script_request
from execgym.sandbox._results import sandbox_error
from execgym.sandbox._run import BASE_ENV, check_exec_size, run_contained
from execgym.sandbox.base import BaseSandbox, RunRequest, RunResult

log = logging.getLogger(__name__)

WARNING = (
    "isolation 'none': untrusted code runs as YOU, with your files and network. "
    "Use it only for development; install bubblewrap for real runs."
)
_RECLAIM_WITH_CGROUP = "cgroup kill: every process dies with the run"
_RECLAIM_WITHOUT_CGROUP = (
    "process group kill only: a process that calls setsid() can outlive the run "
    "(no writable cgroup here; use bwrap)"
)


class UnisolatedSandbox(BaseSandbox):
    """Run each program as a plain child process in a fresh temp dir. NOT isolated.

    Args:
        allow_root: Run even when execgym runs as root, where untrusted code would get
            root's full power over the host. Off by default.

    Raises:
        SandboxUnavailable: as root without ``allow_root``.
    """

    name = "none"

    def __init__(self, *, allow_root: bool = False) -> None:
        if os.geteuid() == 0 and not allow_root:
            raise SandboxUnavailable(
                "isolation 'none' would run untrusted code as root, with full power over "
                "this host; use the bwrap sandbox, or pass --allow-root "
                "(UnisolatedSandbox(allow_root=True)) if you really mean it"
            )
        log.warning(WARNING)

    async def run(self, request: RunRequest) -> RunResult:
        """Run ``request`` in a fresh temp dir without isolation; see :meth:`Sandbox.run`.

        Raises:
            TaskError: if the command is too big for Linux to start (``check_exec_size``).
        """
        request = script_request(request)
        argv, env = request.argv, request.env
        relatives = {safe_relative(name): content for name, content in request.files.items()}
        check_exec_size(argv, {**BASE_ENV, **env})
        import tempfile  # here: no other sandbox's command needs it at start (issue 23)

        work = tempfile.mkdtemp(prefix="execgym-none-")
        try:
            for relative, content in relatives.items():
                target = Path(work) / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
            full_env = {**BASE_ENV, "HOME": work, "TMPDIR": work, **env}
            return await run_contained(
                argv,
                isolation=self.name,
                count_writes=True,  # the launcher is the program (the gate execs it)
                env=full_env,
                stdin=request.stdin,
                limits=request.limits,
                fd_map={},
                want_report=request.want_report,
                cwd=work,
                enforcement={
                    "network": "not enforced (isolation none)",
                    "disk_bytes": "not enforced (isolation none)",
                    "reclaim": _RECLAIM_WITH_CGROUP
                    if detect_cgroups().version
                    else _RECLAIM_WITHOUT_CGROUP,
                },
            )
        except OSError as error:
            return sandbox_error(self.name, f"could not prepare the work dir: {error}")
        finally:
            shutil.rmtree(work, ignore_errors=True)
