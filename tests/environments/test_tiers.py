"""Every sandbox tier runs in an imported image, with the same limits and report channel."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator

import pytest

from execgym.environments import Environment
from execgym.limits import Limits, MiB
from execgym.sandbox.base import Status
from execgym.sandbox.bwrap import BubblewrapSandbox
from execgym.sandbox.gvisor import GVisorSandbox
from execgym.sandbox.pool import WarmPoolSandbox
from tests.conftest import require

# The first test of a session may import the Debian image (15-40 s; 75 s seen with the
# machine's load at 30) and build it on a new machine (mmdebstrap: 40-80 s more); builds
# copy its 210 MB root.
pytestmark = pytest.mark.timeout(600)

TIERS = ["bwrap", "prestart", "pool", "gvisor"]

PROBE = b"""
import json, os, sys

out = {"version": sys.version.split()[0], "executable": sys.executable,
       "os": open("/etc/os-release").read().split("\\n")[0],
       "issue": os.path.exists("/etc/issue"), "data": sorted(os.listdir("/opt/data")),
       "replaced": open("/opt/replaced").read(), "uid": os.getuid(),
       "work": open("in.txt").read(), "apt": os.path.isfile("/etc/apt/sources.list")}
for path in ("/usr/bin/x", "/etc/x", "/x", "/etc/apt/x"):
    try:
        open(path, "w")
        out[path] = "written"
    except OSError as error:
        out[path] = error.errno
os.write(3, b"verdict")
print(json.dumps(out))
"""


@pytest.fixture(params=TIERS)
async def box(request: pytest.FixtureRequest, debian_top: Environment) -> AsyncIterator[object]:
    """A sandbox of each tier in the ``top`` image."""
    tier = request.param
    if tier == "gvisor":
        require(os.geteuid() == 0, "root (for gVisor)")
        yield GVisorSandbox(environment=debian_top)
    elif tier == "pool":
        async with WarmPoolSandbox(environment=debian_top) as pool:
            yield pool
    else:
        prestart = 1 if tier == "prestart" else 0
        async with BubblewrapSandbox(environment=debian_top, prestart=prestart) as fresh:
            if prestart:
                assert await fresh.prestart(Limits()), "prestart is not possible here"
            yield fresh


async def test_programs_see_the_image_and_nothing_else(box, debian_top: Environment) -> None:
    result = await box.run_python(PROBE, files={"in.txt": b"staged"}, want_report=True)
    assert result.status is Status.OK, result
    seen = json.loads(result.stdout)
    assert seen["version"] == "3.11.2"  # bookworm's Python, not the host's
    assert seen["executable"] == debian_top.config.python
    assert seen["os"] == 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"'
    assert (seen["issue"], seen["data"], seen["replaced"]) == (False, ["c"], "layer 3\n")
    assert seen["work"] == "staged"
    # /usr and /etc/apt are the base image's directories, bound over empty mount points
    assert {"/usr", "/etc/apt"} <= dict(debian_top.shared).keys()
    assert seen["apt"]
    assert seen["uid"] != 0
    # the shared root is read-only whatever the permission bits say (EROFS, or EACCES
    # where the run's uid cannot write there first)
    written = ("/usr/bin/x", "/etc/x", "/x", "/etc/apt/x")
    assert all(seen[path] in (13, 30) for path in written), seen
    assert result.report == b"verdict"


async def test_limits_hold_in_the_image(box) -> None:
    fill = (
        "f = open('big', 'wb')\ntry:\n    while True: f.write(b'x' * 1048576); f.flush()\n"
        "except OSError as e:\n    print(e.errno)\n"
    )
    disk = await box.run_python(
        fill.encode(), limits=Limits(disk_bytes=8 * MiB, max_file_bytes=64 * MiB)
    )
    assert (disk.status, disk.stdout.strip()) == (Status.OK, b"28"), disk  # ENOSPC
    assert disk.enforcement["disk_bytes"]
    memory = await box.run_python(
        b"x = bytearray(2 * 1024 ** 3)\nprint(len(x))", limits=Limits(memory_bytes=256 * MiB)
    )
    assert (memory.status, memory.limit_hit) == (Status.MEMORY_LIMIT, "memory_bytes"), memory
    spin = await box.run_python(b"while True: pass", limits=Limits(wall_time_s=1, cpu_time_s=0.5))
    assert spin.status is Status.TIME_LIMIT, spin


async def test_a_shell_program_runs_with_the_images_shell_and_path(box) -> None:
    result = await box.run_argv(["sh", "-c", "echo $PATH; cat /etc/debian_version; ls /etc/issue"])
    assert result.status is Status.RUNTIME_ERROR  # ls: /etc/issue is whited out
    lines = result.stdout.decode().splitlines()
    assert lines[0] == "/usr/local/bin:/usr/bin:/bin"
    assert lines[1].startswith("12.")
