"""``execgym worker --metrics-port`` listens on loopback unless told otherwise (issue 18).

Its metrics port has no authentication; it listened on every interface (``0.0.0.0``)
by default. What the kernel says the port is bound to is read from ``/proc/net/tcp``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

from execgym.testing import free_port
from tests.conftest import require


def listening_on(port: int) -> set[str]:
    """The local addresses (``"127.0.0.1"``, ``"0.0.0.0"``, ``"::"``...) listening on ``port``."""
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        if not Path(table).exists():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state != "0A" or int(hex_port, 16) != port:  # 0A: LISTEN
                continue
            raw = bytes.fromhex(address)
            if width == 8:
                found.add(".".join(str(b) for b in reversed(raw)))
            else:
                words = [raw[i : i + 4][::-1].hex() for i in range(0, 16, 4)]
                found.add("::" if set("".join(words)) == {"0"} else ":".join(words))
    return found


def test_worker_metrics_listen_on_loopback_by_default() -> None:
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    port = free_port()
    argv = [sys.executable, "-m", "execgym", "worker", "--broker", "embedded"]
    argv += ["--concurrency", "1", "--metrics-port", str(port)]
    node = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not listening_on(port) and time.monotonic() < deadline:
            assert node.poll() is None, "the worker exited"
            time.sleep(0.1)
        assert listening_on(port) == {"127.0.0.1"}
    finally:
        node.terminate()  # drains and stops its sandboxes
        try:
            node.wait(timeout=20)
        except subprocess.TimeoutExpired:
            node.kill()
            node.wait()
