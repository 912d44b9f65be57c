"""How each language is compiled and run inside the sandbox, and the :class:`Program`.

Every command here runs inside the sandbox, in its work dir, with the toolchain found on
the host by :mod:`execgym.toolchains`. A compiled binary comes back out of the sandbox
as bytes and goes into later runs as an ordinary file, which is copied and made
executable inside the sandbox before it starts (files are placed read-write but not
executable, and the sandbox user cannot chmod a file it does not own).
"""

from __future__ import annotations

import functools
import math
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from execgym.errors import TaskError
from execgym.languages import LANGUAGES
from execgym.limits import DEFAULT_LIMITS, Limits
from execgym.sandbox import RESERVES_ADDRESS_SPACE_ENV, python_command
from execgym.sandbox.base import RunRequest, RunResult, Sandbox
from execgym.tasks.models import DEFAULT_CONVENTIONS, Conventions
from execgym.toolchains import Toolchain

BINARY = "main"
"""The file name a native compiler writes; also the name it has in later runs."""

_EXEC_COPY = 'cp -- "$0" ./.execgym-exe && chmod 700 ./.execgym-exe && exec ./.execgym-exe "$@"'
_RAISE_STACK = 'ulimit -s {kib} 2>/dev/null || ulimit -s "$(ulimit -H -s)" 2>/dev/null; '
"""Raises the stack's soft limit (to the hard limit when that is lower) before exec."""
_V8_HEADROOM_KIB = 8192
"""Stack left to native frames below Node's ``--stack-size`` (KiB)."""

PYTHON_LAUNCHER = b"""\
import builtins, sys
if EXECGYM_EXIT:
    from _sitebuiltins import Quitter
    builtins.exit = Quitter("exit", "Ctrl-D (i.e. EOF)")
    builtins.quit = Quitter("quit", "Ctrl-D (i.e. EOF)")
sys.set_int_max_str_digits(EXECGYM_DIGITS)
sys.argv = ["main.py"]
with open("main.py", "rb") as handle:
    code = compile(handle.read(), "main.py", "exec", dont_inherit=True)
exec(code, {"__name__": "__main__", "__file__": "main.py", "__builtins__": builtins})
"""
"""Starts a Python stdio program under the task's :class:`Conventions` (``exit``/``quit``
as ``site`` defines them, the int digit limit), then runs ``main.py`` as ``__main__`` in
a namespace of its own, so its line numbers and tracebacks are its own."""
_JAVA_PUBLIC_CLASS = re.compile(r"public\s+(?:(?:final|abstract)\s+)*class\s+([A-Za-z_]\w*)")
_JAVA_MAIN_CLASS = re.compile(
    r"class\s+([A-Za-z_]\w*)[^{]*\{(?:(?!\bclass\b).)*?static\s+void\s+main\s*\(", re.S
)
_JAVA_OPTIONS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss256m", "-XX:-UsePerfData")


@dataclass(frozen=True, slots=True)
class Program:
    """A solution ready to run: its command inside the sandbox and the files it needs.

    Attributes:
        language: The language.
        argv: The command inside the sandbox.
        files: The files it needs in its work dir (source or compiled output).
        env: Environment variables it needs.
        python_source: For Python, the script that starts it, so a run without
            arguments or extra files goes through :meth:`Sandbox.run_python` (the warm
            pool, when used), with :attr:`files` beside it.
        stack_bytes: The stack limit of a compiled native program or a Node.js one:
            ``"memory"`` (the run's memory limit), bytes, or ``None`` (the sandbox's
            default, 8 MiB on most hosts; Node's own ~1 MB).
    """

    language: str
    argv: tuple[str, ...]
    files: Mapping[str, bytes]
    env: Mapping[str, str] = field(default_factory=dict)
    python_source: bytes | None = None
    stack_bytes: str | int | None = None

    async def run(
        self,
        sandbox: Sandbox,
        *,
        stdin: bytes = b"",
        limits: Limits = DEFAULT_LIMITS,
        args: Sequence[str] = (),
        extra_files: Mapping[str, bytes] | None = None,
        want_report: bool = False,
    ) -> RunResult:
        """Run the program once in ``sandbox``; see :meth:`Sandbox.run`."""
        env = self.env
        if self.python_source is not None and not args and not extra_files:
            return await sandbox.run(
                RunRequest(
                    python_source=self.python_source,
                    stdin=stdin,
                    files=self.files,
                    limits=limits,
                    env=env,
                    want_report=want_report,
                )
            )
        return await sandbox.run(
            RunRequest(
                argv=[*self.with_stack(limits), *args],
                stdin=stdin,
                files={**self.files, **(extra_files or {})},
                limits=limits,
                env=env,
                want_report=want_report,
            )
        )

    def with_stack(self, limits: Limits) -> list[str]:
        """:attr:`argv`, raising the stack limit first for a compiled program or Node.

        The native launcher is ``/bin/sh -c SCRIPT``: ``ulimit -s`` goes at the start of
        its script, so the limit is set in the process that then execs the program. Node
        is started the same way, with ``--stack-size`` 8 MiB below that limit.
        """
        stack = stack_limit_bytes(self.stack_bytes, limits)
        if stack is None:
            return list(self.argv)
        kib = math.ceil(stack / 1024)
        if self.language == "javascript" and kib > 2 * _V8_HEADROOM_KIB:
            # V8 stops at --stack-size (RangeError) only if the OS stack is larger still:
            # the flag is given only when ulimit could raise the stack (AtCoder runs
            # ``node --stack-size={memory:kb}``).
            script = (
                f'ulimit -s {kib} 2>/dev/null && exec "$0" --stack-size={kib - _V8_HEADROOM_KIB} '
                '"$@"; exec "$0" "$@"'
            )
            return ["/bin/sh", "-c", script, *self.argv]
        if tuple(self.argv[:2]) != ("/bin/sh", "-c"):
            return list(self.argv)
        script = _RAISE_STACK.format(kib=kib) + self.argv[2]
        return [*self.argv[:2], script, *self.argv[3:]]


def stack_limit_bytes(rule: str | int | None, limits: Limits) -> int | None:
    """The stack limit in bytes a :attr:`Program.stack_bytes` rule gives under ``limits``.

    ``"memory"`` is ``limits.memory_bytes``; ``None`` stays ``None`` (the default stack).
    """
    if rule == "memory":
        return limits.memory_bytes
    return rule if isinstance(rule, int) else None


@dataclass(frozen=True, slots=True)
class LanguageSpec:
    """How one language's source becomes a :class:`Program`.

    Attributes:
        name: The language.
        source_name: The file name a given source must have (Java: its public class).
        compile: ``(toolchain, source file) -> argv`` of the compile step, or ``None``.
        outputs: What the compile step leaves that the program needs (files or dirs).
        run: ``(toolchain, source file, source) -> argv`` that runs the program.
        env: Environment for the compile step and the program.
    """

    name: str
    source_name: Callable[[str], str]
    run: Callable[[Toolchain, str, str], list[str]]
    compile: Callable[[Toolchain, str], list[str]] | None = None
    outputs: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)


def java_class(source: str) -> str:
    """The class a Java source must be named after (its public class; ``Main`` if none)."""
    public = _JAVA_PUBLIC_CLASS.search(source)
    if public:
        return public.group(1)
    with_main = _JAVA_MAIN_CLASS.search(source)
    return with_main.group(1) if with_main else "Main"


def _native() -> list[str]:
    return ["/bin/sh", "-c", _EXEC_COPY, BINARY]


def _tool(path: str | None) -> str:
    if path is None:  # a spec only pairs with the toolchain its finder returns
        raise ValueError("the toolchain lacks the tool this language needs")
    return path


def _c(tc: Toolchain, name: str) -> list[str]:
    return [_tool(tc.compiler), "-O2", "-std=gnu17", "-o", BINARY, name, "-lm"]


def _cpp(tc: Toolchain, name: str) -> list[str]:
    return [_tool(tc.compiler), "-O2", "-std=gnu++17", "-o", BINARY, name]


STANDARDS = {
    "c": ("gnu23", "gnu2x", "gnu17", "gnu11"),
    "cpp": ("gnu++23", "gnu++2b", "gnu++20", "gnu++2a", "gnu++17"),
}
"""``-std=`` values tried, newest first, when a task does not name one (C23 is
ISO/IEC 9899:2024 and C++23 ISO/IEC 14882:2024, the newest published standards;
``gnu2x``/``gnu++2b`` are their names in GCC 12 and older)."""


@functools.lru_cache(maxsize=64)
def accepts_standard(language: str, compiler: str, fingerprint: str, standard: str) -> bool:
    """Whether ``compiler`` accepts ``-std=standard`` (an empty translation unit compiles).

    Run on the host, with the same compiler binary the sandbox runs (under ``/usr``), on
    our own empty input, once per compiler and standard (``fingerprint`` changes when
    the compiler is replaced).
    """
    del fingerprint  # part of the cache key only
    source_language = "c" if language == "c" else "c++"
    try:
        done = subprocess.run(  # a fixed argv on our own empty input
            [compiler, f"-std={standard}", "-fsyntax-only", "-x", source_language, "-"],
            input=b"",
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def newest_standard(language: str, compiler: str, fingerprint: str) -> str:
    """The newest ``-std=`` of :data:`STANDARDS` that ``compiler`` accepts.

    The oldest candidate when none works (the compile in the sandbox then reports the
    compiler's own message).
    """
    for standard in STANDARDS[language]:
        if accepts_standard(language, compiler, fingerprint, standard):
            return standard
    return STANDARDS[language][-1]


def apply_conventions(
    language: str, toolchain: Toolchain, argv: list[str], conventions: Conventions
) -> list[str]:
    """A C or C++ compile command under ``conventions``: its ``-std=`` and ``-D`` flags.

    Other languages' commands are returned unchanged.

    Raises:
        TaskError: if the task names a standard the compiler does not accept (the task's
            fault, not every rollout's ``compile_error``: its rollouts are ``invalid``).
    """
    if language not in ("c", "cpp"):
        return argv
    chosen = conventions.c_std if language == "c" else conventions.cpp_std
    if chosen is None:
        chosen = newest_standard(language, argv[0], toolchain.fingerprint)
    elif not accepts_standard(language, argv[0], toolchain.fingerprint, chosen):
        field = "c_std" if language == "c" else "cpp_std"
        raise TaskError(
            f"the task's conventions.{field} {chosen!r} is not accepted by this host's "
            f"compiler ({argv[0]}): name one it knows (e.g. {STANDARDS[language][-1]!r}), "
            "or leave it unset for the newest it supports"
        )
    out = [f"-std={chosen}" if word.startswith("-std=") else word for word in argv]
    if conventions.online_judge:
        out.insert(1, "-DONLINE_JUDGE")
    return out


def python_program(
    argv: tuple[str, ...], source: bytes, conventions: Conventions = DEFAULT_CONVENTIONS
) -> tuple[tuple[str, ...], dict[str, bytes], bytes]:
    """``(argv, files, python_source)`` of a Python stdio program under ``conventions``.

    The program is ``main.py``; what starts it is :data:`PYTHON_LAUNCHER` (as
    ``launcher.py`` for a run by argv, as the script of a warm-pool run).
    """
    launcher = PYTHON_LAUNCHER.replace(b"EXECGYM_EXIT", str(conventions.python_exit).encode())
    digits = str(conventions.python_int_max_str_digits).encode()
    launcher = launcher.replace(b"EXECGYM_DIGITS", digits)
    run = tuple(word if word != "main.py" else "launcher.py" for word in argv)
    return run, {"main.py": source, "launcher.py": launcher}, launcher


def _rust_options(tc: Toolchain) -> list[str]:
    linker = f"linker={_tool(tc.linker)}"
    return [_tool(tc.compiler), "--edition=2021", "-O", "-C", "strip=symbols", "-C", linker]


def _rust_compile(tc: Toolchain, name: str) -> list[str]:
    return [*_rust_options(tc), "-o", BINARY, name]


def _javac(tc: Toolchain, name: str) -> list[str]:
    options = ["-J-XX:+UseSerialGC", "-J-XX:TieredStopAtLevel=1", "-encoding", "UTF-8"]
    return [_tool(tc.compiler), *options, "-nowarn", "-d", "classes", name]


def _java(tc: Toolchain, name: str, source: str) -> list[str]:
    return [_tool(tc.runner), *_JAVA_OPTIONS, "-cp", "classes", name.removesuffix(".java")]


def _interpreted(tc: Toolchain, name: str, source: str) -> list[str]:
    return [_tool(tc.runner), name]


SPECS: dict[str, LanguageSpec] = {
    "python": LanguageSpec(
        "python", lambda _: "main.py", lambda tc, name, _: python_command(name, tc.runner)
    ),
    "c": LanguageSpec("c", lambda _: "main.c", lambda *_: _native(), _c, (BINARY,)),
    "cpp": LanguageSpec("cpp", lambda _: "main.cpp", lambda *_: _native(), _cpp, (BINARY,)),
    "java": LanguageSpec(
        "java", lambda source: java_class(source) + ".java", _java, _javac, ("classes",)
    ),
    "javascript": LanguageSpec("javascript", lambda _: "main.js", _interpreted),
    "rust": LanguageSpec(
        "rust", lambda _: "main.rs", lambda *_: _native(), _rust_compile, (BINARY,)
    ),
    "bash": LanguageSpec("bash", lambda _: "main.sh", _interpreted),
    "go": LanguageSpec(
        "go",
        lambda _: "main.go",
        lambda *_: _native(),
        lambda tc, name: [_tool(tc.compiler), "build", "-o", BINARY, name],
        (BINARY,),
        env={
            **LANGUAGES["go"].env,
            # Go's runtime reserves address space up front (its page summaries): where
            # no cgroup limits memory, the sandbox spares it RLIMIT_AS and samples RSS.
            RESERVES_ADDRESS_SPACE_ENV[0]: RESERVES_ADDRESS_SPACE_ENV[1],
        },
    ),
}
"""How the judges build each task language of :data:`execgym.languages.LANGUAGES` (whose
rows give the tools, the install hints and the environment)."""


KNOWN_GOOD: dict[str, str] = {
    "c": '#include <stdio.h>\nint main(void){long a,b; scanf("%ld %ld",&a,&b); '
    'printf("%ld\\n",a+b); return 0;}\n',
    "cpp": "#include <iostream>\nint main(){long a,b; std::cin>>a>>b; std::cout<<a+b<<'\\n';}\n",
    "java": "import java.util.*;\npublic class Solution {\n"
    "  public static void main(String[] x) {\n    Scanner s = new Scanner(System.in);\n"
    "    System.out.println(s.nextLong() + s.nextLong());\n  }\n}\n",
    "javascript": "const [a, b] = require('fs').readFileSync(0, 'utf8').trim().split(/\\s+/)"
    ".map(Number);\nconsole.log(a + b);\n",
    "rust": "use std::io::Read;\nfn main() {\n    let mut s = String::new();\n"
    "    std::io::stdin().read_to_string(&mut s).unwrap();\n"
    "    let v: Vec<i64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();\n"
    '    println!("{}", v[0] + v[1]);\n}\n',
    "bash": "read a b\necho $((a + b))\n",
    "go": 'package main\n\nimport "fmt"\n\nfunc main() {\n\tvar a, b int\n\tfmt.Scan(&a, &b)\n'
    "\tfmt.Println(a + b)\n}\n",
    "python": "a, b = map(int, input().split())\nprint(a + b)\n",
}
"""Per language, a program that reads two integers and prints their sum: the probe that
shows a toolchain works inside the sandbox before any rollout is blamed for it."""
