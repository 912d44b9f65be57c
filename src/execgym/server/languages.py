"""The languages ``/run_code`` and ``/v1/run`` accept: source file, compile and run steps.

Each language names the host tools it needs (in the one language table,
:data:`execgym.languages.LANGUAGES`); :func:`find_toolchains` looks for them once
at start-up. A tool outside ``/usr`` (rustup's toolchains under ``~/.rustup``, say) is
exposed to the sandbox read-only at the same path; a language whose tools are missing
is *unavailable* and answered with a message saying what to install, never run.

Names follow SandboxFusion's ``Language`` (``sandbox/runners/types.py``), so a verl
client's ``language`` field works unchanged.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from execgym.languages import LANGUAGES as LANGUAGE_TABLE
from execgym.sandbox import RESERVES_ADDRESS_SPACE_ENV, python_command


@dataclass(frozen=True, slots=True)
class Language:
    """How to build and run one language in a sandbox.

    Attributes:
        name: The request's ``language`` value.
        tools: Host executables needed, looked up on ``PATH``.
        install_hint: What to install when a tool is missing.
        max_processes: Processes and threads the run may use (JVMs and Node start many).
        env: Extra environment variables for both steps.
    """

    name: str
    tools: tuple[str, ...]
    install_hint: str
    max_processes: int = 64
    env: Mapping[str, str] = field(default_factory=dict)


LANGUAGES: dict[str, Language] = {
    name: Language(name, row.tools, row.install_hint, row.max_processes, row.env)
    for row in LANGUAGE_TABLE.values()
    for name in row.service_names
}
"""Languages with a build recipe here, by their service name: the rows of the one
language table, :data:`execgym.languages.LANGUAGES`, that name one."""

SANDBOX_FUSION_LANGUAGES = (
    *LANGUAGES,
    "go_test",
    "php",
    "csharp",
    "sql",
    "cuda",
    "lua",
    "R",
    "perl",
    "D_ut",
    "ruby",
    "scala",
    "julia",
    "junit",
    "kotlin_script",
    "jest",
    "verilog",
    "python_gpu",
    "lean",
    "swift",
    "racket",
)
"""Every name SandboxFusion (and verl's client) knows; those without a recipe here are
answered as unavailable rather than rejected."""


@dataclass(frozen=True, slots=True)
class Toolchains:
    """The host tools found at start-up.

    Attributes:
        tools: ``{tool name: absolute path}`` of the tools found.
        read_only_paths: Host directories outside ``/usr`` to expose to the sandbox.
        pytest_path: The directory holding the ``pytest`` package, if any.
    """

    tools: Mapping[str, str]
    read_only_paths: tuple[str, ...] = ()
    pytest_path: str | None = None

    def missing(self, language: Language) -> list[str]:
        """The tools ``language`` needs that were not found."""
        missing = [tool for tool in language.tools if tool not in self.tools]
        if language.name == "pytest" and self.pytest_path is None:
            missing.append("pytest")
        return missing


def _resolve(tool: str, which: Callable[[str], str | None]) -> str | None:
    found = which(tool)
    if found is None:
        return None
    real = os.path.realpath(found)
    if Path(real).name == "rustup":  # a rustup proxy: find the toolchain's real binary
        try:
            answer = subprocess.run(
                [real, "which", tool], capture_output=True, text=True, timeout=10, check=True
            )
        except (OSError, subprocess.SubprocessError):
            return None
        real = os.path.realpath(answer.stdout.strip())
    return real if os.access(real, os.X_OK) else None


def _home(path: str) -> Path:
    """A tool's installation: the parent of its ``bin`` folder, or its folder."""
    folder = Path(path).parent
    return folder.parent if folder.name == "bin" else folder


def _bind_roots(path: str) -> set[str]:
    """Host folders a tool needs besides ``/usr``.

    Its home when outside ``/usr``, and the ``/etc`` folders its home links into
    (Debian's JDK keeps ``conf/`` in ``/etc/java-17-openjdk``).
    """
    home = _home(path)
    roots = set() if path.startswith("/usr/") else {str(home)}
    for sub in ("conf", "etc"):
        for folder, _, names in os.walk(home / sub):
            for name in names:
                link = Path(folder, name)
                if link.is_symlink():
                    target = Path(os.path.realpath(link))
                    if target.parts[1:2] == ("etc",) and len(target.parts) > 3:
                        roots.add(str(Path(*target.parts[:3])))
    return roots


def find_toolchains(
    which: Callable[[str], str | None] = shutil.which, *, pytest_path: str | None = None
) -> Toolchains:
    """Look for every language's tools on the host.

    Args:
        which: Finds an executable by name (``shutil.which``; tests pass a fake).
        pytest_path: Where the ``pytest`` package lives; found by import by default.
    """
    tools: dict[str, str] = {}
    roots: set[str] = set()
    for language in LANGUAGES.values():
        for tool in language.tools:
            if tool in tools:
                continue
            path = _resolve(tool, which)
            if path is not None:
                tools[tool] = path
                roots |= _bind_roots(path)
    if pytest_path is None:
        pytest_path = _pytest_site()
    if pytest_path is not None:
        roots.add(pytest_path)
    return Toolchains(tools, tuple(sorted(roots)), pytest_path)


SANDBOX_MOUNTS = ("/work", "/tmp", "/proc", "/dev")
"""Sandbox mount points: a host folder below one of them cannot be exposed."""


def _pytest_site() -> str | None:
    """The site-packages holding pytest.

    The base interpreter's first (it is already visible in the sandbox), then this
    environment's, if the sandbox can see it.
    """
    base = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix})
    candidates = [base["purelib"]]
    try:
        import pytest

        candidates.append(str(Path(pytest.__file__).resolve().parent.parent))
    except ImportError:
        pass
    for candidate in candidates:
        real = os.path.realpath(candidate)
        hidden = any(real == m or real.startswith(m + "/") for m in SANDBOX_MOUNTS)
        if (Path(real) / "pytest" / "__init__.py").is_file() and not hidden:
            return real
    return None


def utf8(text: str) -> bytes:
    """``text`` as UTF-8, lone surrogates kept as the invalid bytes they stand for.

    JSON allows a lone surrogate escape; the program, not the server, then fails on it.
    """
    return text.encode("utf-8", errors="surrogatepass")


@dataclass(frozen=True, slots=True)
class Recipe:
    """The concrete steps for one request: files to write, compile and run argv."""

    files: Mapping[str, bytes]
    compile: Sequence[str] | None
    run: Sequence[str]
    env: Mapping[str, str]
    max_processes: int


_RESERVING = frozenset({"java", "nodejs", "typescript", "go"})
"""Languages whose compiler or runtime reserves address space up front (JVM, V8, Go):
where no cgroup limits memory, the sandbox gives them no ``RLIMIT_AS`` (see
:func:`execgym.sandbox._rlimits.reserves_address_space`)."""

_JAVA_CLASS = re.compile(r"public\s+(?:final\s+)?class\s+([A-Za-z_$][\w$]*)")
_JVM_FLAGS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData", "-Xshare:auto")
_PYTEST_MAIN = (
    "import sys\nsys.path[:0] = [{site!r}]\nimport pytest\n"
    "raise SystemExit(pytest.main(['-q', '-p', 'no:cacheprovider', 'test_main.py']))\n"
)


def recipe(language: Language, code: str, toolchains: Toolchains) -> Recipe:
    """The files and steps that build and run ``code`` in ``language``.

    The caller has checked with :meth:`Toolchains.missing` that every tool is there.
    """
    tool = toolchains.tools.get
    source = utf8(code)
    steps: dict[str, tuple[dict[str, bytes], list[str] | None, list[str]]] = {
        "python": ({"main.py": source}, None, python_command("main.py")),
        "bash": ({"main.sh": source}, None, [tool("bash", ""), "main.sh"]),
        "nodejs": ({"main.js": source}, None, [tool("node", ""), "main.js"]),
        "cpp": (
            {"main.cpp": source},
            [tool("g++", ""), "-std=c++17", "-O2", "-o", "main", "main.cpp"],
            ["./main"],
        ),
        "rust": (
            {"main.rs": source},
            [
                *(tool("rustc", ""), "-O", "--edition", "2021"),
                *("-C", f"linker={tool('cc', '')}", "-o", "main", "main.rs"),
            ],
            ["./main"],
        ),
        "go": (
            {"main.go": source},
            [tool("go", ""), "build", "-o", "main", "main.go"],
            ["./main"],
        ),
        # Types are not checked (--noCheck, TypeScript >= 5.5), as SandboxFusion runs
        # TypeScript with tsx (``sandbox/runners/major.py``): only a syntax error stops
        # the build; Node's modules import as there (``import util from "util"``).
        "typescript": (
            {"main.ts": source},
            [
                *(tool("tsc", ""), "--target", "es2020", "--module", "commonjs"),
                *("--skipLibCheck", "--noCheck", "--esModuleInterop", "main.ts"),
            ],
            [tool("node", ""), "main.js"],
        ),
    }
    if language.name == "java":
        match = _JAVA_CLASS.search(code)
        name = match.group(1) if match else "Main"
        steps["java"] = (
            {f"{name}.java": source},
            [tool("javac", ""), *(f"-J{flag}" for flag in _JVM_FLAGS), f"{name}.java"],
            # -ea: assertions on, as SandboxFusion runs Java (``sandbox/runners/major.py``)
            # and as MultiPL-E's Java tests need (``assert`` is their check).
            [tool("java", ""), *_JVM_FLAGS, "-ea", "-cp", ".", name],
        )
    if language.name == "pytest":
        main = _PYTEST_MAIN.format(site=toolchains.pytest_path).encode()
        steps["pytest"] = (
            {"test_main.py": source, "run_pytest.py": main},
            None,
            python_command("run_pytest.py"),
        )
    files, compile_argv, run_argv = steps[language.name]
    env = dict(language.env)
    if language.name in _RESERVING:  # steps run under a driver: say so in the environment
        env[RESERVES_ADDRESS_SPACE_ENV[0]] = RESERVES_ADDRESS_SPACE_ENV[1]
    if language.name == "pytest":
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return Recipe(files, compile_argv, run_argv, env, language.max_processes)
