"""Which compilers and interpreters this host has, and what the sandbox must see of them.

The languages and the tools each needs are those of :data:`execgym.languages.LANGUAGES`.

A toolchain under ``/usr`` (gcc, g++, javac, node, bash, Debian's go) is visible in
every sandbox already. One elsewhere (rustup's toolchains under ``~/.rustup``, a node
under ``/usr/local``, Java's configuration under ``/etc/java-*``) is found here and
bound read-only into the sandbox at the same path by :func:`toolchain_paths`. Nothing
here runs untrusted code: the host's own tools are asked where they live, once.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from execgym.languages import LANGUAGES

PYTHON_LIBRARIES_DIR = "/opt/execgym/site-packages"
"""Where the host environment's site-packages (pytest) appears inside the sandbox."""

_PROBE_TIMEOUT_S = 20.0


@dataclass(frozen=True, slots=True)
class Toolchain:
    """One language's tools on this host.

    Attributes:
        language: The language (see :data:`execgym.tasks.models.LANGUAGES`).
        compiler: Absolute path of the compiler, or ``None`` for interpreted languages.
        runner: Absolute path of the interpreter or VM, or ``None`` for native binaries.
        host_paths: Host directories outside ``/usr`` the sandbox must see read-only.
        fingerprint: Identifies the exact tools (path, size, mtime), for cache keys.
        linker: The C compiler used as linker (Rust), resolved past ``/etc/alternatives``,
            which the sandbox does not see.
    """

    language: str
    compiler: str | None
    runner: str | None
    host_paths: tuple[str, ...] = ()
    fingerprint: str = ""
    linker: str | None = None


def _fingerprint(*paths: str | None) -> str:
    parts = []
    for path in paths:
        if path:
            stat = os.stat(path)
            parts.append(f"{path}:{stat.st_size}:{stat.st_mtime_ns}")
    return ";".join(parts)


def _outside_usr(*paths: str) -> tuple[str, ...]:
    return tuple(sorted({p for p in paths if p != "/usr" and not p.startswith("/usr/")}))


def _which(name: str) -> str | None:
    found = shutil.which(name)
    return os.path.realpath(found) if found else None


def _probe(argv: list[str]) -> str | None:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _python() -> Toolchain:
    interpreter = os.path.realpath(sys.executable)  # as execgym.sandbox runs it
    return Toolchain("python", None, interpreter, (), _fingerprint(interpreter))


def _simple(language: str, *, compiled: bool) -> Toolchain | None:
    """A language with one tool (:data:`LANGUAGES`): its compiler, or its interpreter."""
    name = LANGUAGES[language].tools[0]
    compiler, runner = (name, None) if compiled else (None, name)
    tool = _which(compiler) if compiler else None
    run = _which(runner) if runner else None
    if (compiler and tool is None) or (runner and run is None):
        return None
    dirs = [str(Path(p).parent) for p in (tool, run) if p]
    return Toolchain(language, tool, run, _outside_usr(*dirs), _fingerprint(tool, run))


def _rust() -> Toolchain | None:
    rustc = shutil.which("rustc")
    sysroot = _probe([rustc, "--print", "sysroot"]) if rustc else None
    if not sysroot:
        return None
    real = os.path.join(os.path.realpath(sysroot), "bin", "rustc")  # not rustup's proxy
    linker = _which("cc")
    if not os.path.exists(real) or linker is None:
        return None
    paths = _outside_usr(os.path.realpath(sysroot))
    return Toolchain("rust", real, None, paths, _fingerprint(real, linker), linker)


def _java() -> Toolchain | None:
    javac, java = _which("javac"), _which("java")
    if javac is None or java is None:
        return None
    home = Path(javac).parents[1]
    paths = [str(home)]
    config = home / "lib" / "jvm.cfg"  # Debian keeps the JVM's configuration in /etc
    if config.exists():
        paths.append(str(Path(os.path.realpath(config)).parent))
    return Toolchain("java", javac, java, _outside_usr(*paths), _fingerprint(javac, java))


def _go() -> Toolchain | None:
    go = shutil.which("go")
    root = _probe([go, "env", "GOROOT"]) if go else None
    if not root:
        return None
    real = os.path.join(os.path.realpath(root), "bin", "go")
    return Toolchain("go", real, None, _outside_usr(os.path.realpath(root)), _fingerprint(real))


_FINDERS = {
    "python": _python,
    "c": lambda: _simple("c", compiled=True),
    "cpp": lambda: _simple("cpp", compiled=True),
    "java": _java,
    "javascript": lambda: _simple("javascript", compiled=False),
    "rust": _rust,
    "bash": lambda: _simple("bash", compiled=False),
    "go": _go,
}


@functools.cache
def find_toolchain(language: str) -> Toolchain | None:
    """The toolchain for ``language`` on this host, or ``None`` if it is missing.

    The answer is cached for the life of the process.
    """
    finder = _FINDERS.get(language)
    return finder() if finder else None


def missing_hint(language: str) -> str:
    """How to install ``language``'s toolchain on Debian or Ubuntu (from :data:`LANGUAGES`)."""
    known = LANGUAGES.get(language)
    return known.install_hint if known else f"install a {language} toolchain"


def python_libraries() -> tuple[str, str] | None:
    """``(host site-packages holding pytest, its path in the sandbox)``, if pytest exists."""
    # Found, not imported: importing pytest costs a tenth of a second at every start.
    spec = importlib.util.find_spec("pytest")
    if spec is None or spec.origin is None:
        return None
    return (os.path.realpath(Path(spec.origin).parents[1]), PYTHON_LIBRARIES_DIR)


_paths_lock = threading.Lock()


def toolchain_paths() -> tuple[str, ...]:
    """Host directories outside ``/usr`` that every present toolchain needs.

    Found once per process (the probes run side by side); a caller while they run
    (see :func:`find_toolchains_soon`) waits for that answer instead of probing again.
    """
    with _paths_lock:
        return _toolchain_paths()


def find_toolchains_soon() -> None:
    """Start finding the toolchains (:func:`toolchain_paths`) now, on a daemon thread.

    Their probes wait on programs (``rustc --print sysroot`` starts rustup's proxy,
    ``go env GOROOT`` the go tool) that run on another core meanwhile: a command that
    will make a sandbox calls this before its imports, and its sandbox then finds the
    answer waiting (``execgym score`` starts its warm pool's zygote only once it is
    known: every sandbox sees the toolchains' directories).
    """
    threading.Thread(target=toolchain_paths, name="execgym-toolchains", daemon=True).start()


@functools.cache
def _toolchain_paths() -> tuple[str, ...]:
    paths: set[str] = set()
    # Side by side: the probes (rustc --print sysroot, go env GOROOT) wait on programs.
    with ThreadPoolExecutor(len(_FINDERS)) as pool:
        found = list(pool.map(find_toolchain, _FINDERS))
    for toolchain in found:
        if toolchain is not None:
            paths.update(toolchain.host_paths)
    prefix = os.path.realpath(sys.base_prefix)
    return tuple(sorted(p for p in paths if not p.startswith(prefix)))
