"""SandboxFusion's own runner tests, their requests sent to a live ``execgym serve``.

SandboxFusion's ``sandbox/tests/runners/test_<language>.py`` post ``RunCodeRequest``s to
its app through ``fastapi.testclient.TestClient(app)`` and check the
``RunCodeResponse``. This script runs those files unchanged but for one line: the
``client = TestClient(app)`` is replaced by an ``httpx.Client`` pointed at an
``execgym serve`` it starts on a free port. The ``sandbox`` package they import is a
shim holding SandboxFusion's own models, cut from its ``sandbox/runners/types.py`` and
``sandbox/server/sandbox_api.py`` by ``ast`` (nothing retyped).

The files are those of the languages whose toolchain ``.ci/run`` installs (python,
pytest, bash, cpp, java, nodejs, typescript, rust, go) plus ``test_isolation.py``;
SandboxFusion's checkout comes from ``git clone https://github.com/bytedance/SandboxFusion``
(measured at commit 469de0845cb7d665bc68044d541aa3aa28c5b30a).

    .venv/bin/python benchmarks/sandboxfusion_runner_tests.py PATH [--serve-args ...]

``PATH`` is a checkout, or a bare git directory (its ``HEAD`` is read). Prints each
test's outcome and ``passed N of M``. Two tests need what execgym deliberately does not
give: the internet (``test_isolation_network_external_access``) and a preinstalled
third-party jar (``test_java_external_jar``); those are expected to fail.
"""

from __future__ import annotations

import argparse
import ast
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FILES = (
    "python", "pytest", "bash", "cpp", "java", "nodejs", "typescript", "rust", "go", "isolation",
)  # fmt: skip
"""The runner test files run: ``sandbox/tests/runners/test_<name>.py``."""

CLIENT_LINE = "client = TestClient(app)"


def _read(root: Path, path: str) -> str:
    if (root / path).is_file():
        return (root / path).read_text()
    return subprocess.run(
        ["git", f"--git-dir={root}", "show", f"HEAD:{path}"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


def _classes(source: str, names: set[str]) -> str:
    tree = ast.parse(source)
    return "\n\n".join(
        ast.get_source_segment(source, node) or ""
        for node in tree.body
        if isinstance(node, ast.ClassDef | ast.Assign) and _name(node) in names
    )


def _name(node: ast.stmt) -> str:
    if isinstance(node, ast.ClassDef):
        return node.name
    target = node.targets[0] if isinstance(node, ast.Assign) else None
    return target.id if isinstance(target, ast.Name) else ""


def build_shim(root: Path, into: Path) -> None:
    """Write the ``sandbox`` shim package and the rewritten test files into ``into``."""
    types = _read(root, "sandbox/runners/types.py")
    api = _read(root, "sandbox/server/sandbox_api.py")
    header = "from enum import Enum\nfrom typing import *\nfrom pydantic import BaseModel, Field\n"
    package = into / "sandbox"
    (package / "server").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "runners.py").write_text(types)
    (package / "server" / "__init__.py").write_text("")
    (package / "server" / "server.py").write_text("app = None  # the tests use httpx instead\n")
    models = _classes(api, {"RunCodeRequest", "RunStatus", "RunCodeResponse"})
    (package / "server" / "sandbox_api.py").write_text(
        header + "from sandbox.runners import *\n\n" + models + "\n"
    )
    client = (
        "import httpx, os\nclient = httpx.Client(base_url=os.environ['EXECGYM_URL'], timeout=300)"
    )
    for name in FILES:
        text = _read(root, f"sandbox/tests/runners/test_{name}.py")
        if CLIENT_LINE not in text:
            raise SystemExit(f"test_{name}.py has no {CLIENT_LINE!r}: the upstream file changed")
        (into / f"test_{name}.py").write_text(text.replace(CLIENT_LINE, client))
    (into / "pytest.ini").write_text("[pytest]\nasyncio_mode = auto\n")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sandboxfusion", type=Path, help="checkout or bare git dir")
    parser.add_argument("--serve-args", nargs=argparse.REMAINDER, default=[])
    args = parser.parse_args()
    port = _free_port()
    execgym = Path(sys.executable).parent / "execgym"
    server = subprocess.Popen(
        [str(execgym), "serve", "--port", str(port), *args.serve_args],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        import httpx

        url = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                if httpx.get(url + "/readyz", timeout=30).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        else:
            raise SystemExit("execgym serve did not become ready")
        with tempfile.TemporaryDirectory() as scratch:
            build_shim(args.sandboxfusion, Path(scratch))
            result = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
                 "-o", "addopts=", "--timeout=300", "."],
                cwd=scratch, env={**os.environ, "EXECGYM_URL": url, "PYTHONPATH": scratch},
                capture_output=True, text=True,
            )  # fmt: skip
        lines = result.stdout.splitlines()
        outcomes = [line for line in lines if line.startswith(("PASSED", "FAILED", "ERROR"))]
        for line in outcomes:
            print(line[:200])
        passed = sum(line.startswith("PASSED") for line in outcomes)
        print(f"passed {passed} of {len(outcomes)}")
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
