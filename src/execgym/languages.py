"""The one language table: every language execgym knows, and what each needs.

:data:`LANGUAGES` names each language (with the spellings a task or a markdown fence
may use), the host tools its compile and run steps need, what to install when one is
missing, its names in the HTTP service (SandboxFusion's) and the environment its
programs run with. It is read by the tasks (:data:`execgym.tasks.models.LANGUAGES`,
:data:`~execgym.tasks.models.LANGUAGE_ALIASES`), the toolchain finders
(:mod:`execgym.toolchains`), the judges' build recipes
(:data:`execgym.judges.languages.SPECS`) and the HTTP service
(:data:`execgym.server.languages.LANGUAGES`). How a language is compiled and run stays
with each of those two users: the judges build with the task's conventions (C23, C++23
when the compiler has them), the service as SandboxFusion does (``-std=c++17``,
``java -ea``).

Standard library only, and nothing else imported: the tasks' models import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Language:
    """One language execgym runs: its names, the host tools it needs, how to get them.

    Attributes:
        name: execgym's name for it (a task's ``language``; the key of :data:`LANGUAGES`).
        aliases: Other spellings a task or a fence tag may use (``"c++"``, ``"js"``).
        tools: Host executables its compile and run steps need, looked up on ``PATH``.
        install_hint: What to install (on Debian or Ubuntu) when a tool is missing.
        service_names: Its names in the HTTP service's ``language`` field, which follows
            SandboxFusion's ``Language`` (``sandbox/runners/types.py``); empty when the
            service does not run it.
        task_language: Whether a task may be written in it; the others (``pytest``,
            ``typescript``) are run by the service only.
        max_processes: Processes and threads one of its runs may use in the service
            (JVMs and Node start many).
        env: Environment variables of its compile step and its program.
    """

    name: str
    tools: tuple[str, ...]
    install_hint: str
    aliases: tuple[str, ...] = ()
    service_names: tuple[str, ...] = ()
    task_language: bool = True
    max_processes: int = 64
    env: Mapping[str, str] = field(default_factory=dict)


LANGUAGES: dict[str, Language] = {
    language.name: language
    for language in (
        Language(
            "python",
            (),
            "nothing: it runs on execgym's own interpreter",
            aliases=("py", "python3"),
            service_names=("python",),
        ),
        Language("c", ("gcc",), "apt-get install gcc"),
        Language("cpp", ("g++",), "apt-get install g++", ("c++", "cxx"), ("cpp",)),
        Language(
            "java",
            ("javac", "java"),
            "apt-get install default-jdk-headless",
            service_names=("java",),
            max_processes=256,
        ),
        Language(
            "javascript",
            ("node",),
            "apt-get install nodejs",
            ("js", "node", "nodejs"),
            ("nodejs",),
            max_processes=128,
        ),
        Language(
            "rust",
            ("rustc", "cc"),
            "rustup (https://rustup.rs) or apt-get install rustc",
            ("rs",),
            ("rust",),
        ),
        Language("bash", ("bash",), "apt-get install bash", ("sh", "shell"), ("bash",)),
        Language(
            "go",
            ("go",),
            "apt-get install golang-go",
            ("golang",),
            ("go",),
            max_processes=256,
            env={
                "GOCACHE": "/tmp/go-cache",
                "GOPATH": "/tmp/go",
                "GO111MODULE": "off",
                "GOTOOLCHAIN": "local",  # never fetch another toolchain
            },
        ),
        Language(
            "pytest",
            (),
            "pytest in execgym's environment (`pip install pytest`)",
            service_names=("pytest",),
            task_language=False,
        ),
        Language(
            "typescript",
            ("tsc", "node"),
            "npm install -g typescript",
            service_names=("typescript",),
            task_language=False,
            max_processes=128,
        ),
    )
}
"""Every language execgym knows, for the tasks
(:data:`execgym.tasks.models.LANGUAGES`), the judges' build recipes
(:data:`execgym.judges.languages.SPECS`), the toolchain finders here and the HTTP
service's languages (:data:`execgym.server.languages.LANGUAGES`)."""
