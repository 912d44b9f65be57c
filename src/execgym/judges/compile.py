"""The compile step: turn a source into a :class:`Program`, with a cache by source hash.

Compilers run inside the sandbox too (a compiler given hostile source is attack
surface), with their own limits (:data:`COMPILE_LIMITS`, overridden per task by
``Task.compile_limits``). What they produce comes back through the report channel and
is kept in a cache directory on the host, keyed by the SHA-256 of the language, the
exact toolchain (path, size, mtime), the compile command and the source, and of where
it ran (the sandbox backend, the compile limits and whether a cgroup or only rlimits
enforce them: a compiler that fails under one regime may work under another); a task's
repeated rollouts of the same source never recompile it. Compile errors are cached as
well; timeouts are not (they depend on the load). The toolchain probe never trusts a
cached failure of its known-good program: it compiles it again.

Outcomes: a :class:`Program`, or a :class:`Judgement` of ``compile_error`` (with the
compiler's message), ``language_unavailable`` (no toolchain here: masked) or
``sandbox_error``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os
from pathlib import Path

from execgym import guest
from execgym.judges.base import (
    START_MARKER,
    ErrorDetail,
    Judgement,
    Verdict,
    never_started,
    tail_text,
)
from execgym.judges.languages import (
    KNOWN_GOOD,
    SPECS,
    LanguageSpec,
    Program,
    apply_conventions,
    python_program,
)
from execgym.limits import GiB, Limits, MiB
from execgym.sandbox import detect_cgroups, python_command
from execgym.sandbox.base import RunRequest, Sandbox, Status
from execgym.tasks.models import Conventions
from execgym.toolchains import Toolchain, find_toolchain, missing_hint

COMPILE_LIMITS = Limits(
    wall_time_s=60.0,
    cpu_time_s=60.0,
    memory_bytes=2 * GiB,
    max_processes=128,
    max_output_bytes=1 * MiB,
    max_file_bytes=256 * MiB,
    disk_bytes=512 * MiB,
    max_open_files=1024,
)
"""Limits of one compile step (rustc and javac need far more than a run)."""

PROBE_RUN_LIMITS = Limits(wall_time_s=20.0, cpu_time_s=20.0, memory_bytes=1 * GiB)
"""Limits of the run of a language's known-good probe."""


def compile_limits_for(run_limits: Limits) -> Limits:
    """The compile step's limits: :data:`COMPILE_LIMITS`, never tighter than the run's."""
    return COMPILE_LIMITS.merged(
        memory_bytes=max(COMPILE_LIMITS.memory_bytes, run_limits.memory_bytes),
        wall_time_s=max(COMPILE_LIMITS.wall_time_s, run_limits.wall_time_s),
        cpu_time_s=max(COMPILE_LIMITS.cpu_time_s, run_limits.cpu_time_s),
    )


CACHE_VERSION = 2
"""Part of every cache key: raised when what a key covers changes (2: where it ran)."""


def _failed(payload: bytes) -> bool:
    """Whether a cached compile output records a failed compile (or cannot be read)."""
    try:
        header, _ = parse_outputs(payload)
    except ValueError:
        return True
    return header.get("exit_code") != 0


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/execgym/compiled`` (``~/.cache/execgym/compiled`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "execgym" / "compiled"


def _driver_source() -> bytes:
    return guest.source("compile_runner").encode()


def parse_outputs(payload: bytes) -> tuple[dict[str, object], dict[str, bytes]]:
    """Split a compile report (or cache entry) into its header and its files.

    Raises:
        ValueError: if it is truncated or malformed.
    """
    line, _, rest = payload.partition(b"\n")
    header = json.loads(line)
    if not isinstance(header, dict) or not isinstance(header.get("exit_code"), int):
        raise ValueError("the compile report has no exit code")
    files: dict[str, bytes] = {}
    view, at = memoryview(rest), 0
    while at < len(view):
        size = int.from_bytes(view[at : at + 4], "big")
        name = bytes(view[at + 4 : at + 4 + size]).decode("utf-8")
        at += 4 + size
        length = int.from_bytes(view[at : at + 8], "big")
        at += 8
        if at + length > len(view):
            raise ValueError(f"the compiled output {name!r} is truncated")
        files[name] = bytes(view[at : at + length])
        at += length
    return header, files


class Builder:
    """Builds programs: finds the toolchain, compiles in the sandbox, caches the result.

    Args:
        cache_dir: Where compiled outputs are kept; :func:`default_cache_dir` by default.
        use_cache: ``False`` compiles every time (for benchmarks).

    Before a language's first build, the Builder compiles and runs its known-good probe
    (:data:`~execgym.judges.languages.KNOWN_GOOD`) in the same sandbox; a toolchain that
    fails there (a compiler that cannot find its libraries inside the sandbox, a JVM
    without its configuration) makes that language ``language_unavailable`` (masked)
    with the probe's reason, instead of blaming every rollout with a ``compile_error``.
    A probe that times out decides nothing and is tried again on the next build.

    Attributes:
        compiles: Compile steps actually run for rollouts (not served from the cache).
        cache_hits: Builds served from the cache.
    """

    def __init__(self, cache_dir: Path | None = None, *, use_cache: bool = True) -> None:
        self.cache_dir = cache_dir or default_cache_dir()
        self.use_cache = use_cache
        self.compiles = 0
        self.cache_hits = 0
        self._driver = _driver_source()
        self._locks: dict[str, asyncio.Lock] = {}
        self._probed: dict[str, str] = {}  # language -> "" (works) or why it does not

    async def build(
        self,
        language: str,
        source: str,
        sandbox: Sandbox,
        limits: Limits = COMPILE_LIMITS,
        *,
        conventions: Conventions | None = None,
        headers: dict[str, bytes] | None = None,
        extra_flags: tuple[str, ...] = (),
    ) -> Program | Judgement:
        """Make ``source`` runnable; compile it (once per distinct source) if need be.

        Args:
            language: One of :data:`~execgym.judges.languages.SPECS`.
            source: The program.
            sandbox: Where the compiler runs.
            limits: The compile step's limits.
            conventions: The contest-judge conventions of a rollout's program
                (:class:`~execgym.tasks.models.Conventions`: C/C++ ``-std=`` and
                ``ONLINE_JUDGE``, the stack of compiled programs, Python's ``exit``
                and int digits); ``None`` for execgym's own programs (checkers, probes).
            headers: Files placed beside the source for the compile only (a checker's
                ``testlib.h``); part of the cache key.
            extra_flags: Compiler options put after the language's own (later options
                win: ``-O0 -g`` for the diagnostics' build); part of the cache key.
        """
        toolchain = find_toolchain(language)
        if toolchain is None:
            return Judgement(
                Verdict.LANGUAGE_UNAVAILABLE,
                message=f"no {language} toolchain on this host ({missing_hint(language)})",
            )
        problem = await self._probe(language, toolchain, sandbox)
        if problem:
            message = f"the {language} toolchain does not work in the {sandbox.name} sandbox"
            return Judgement(Verdict.LANGUAGE_UNAVAILABLE, message=f"{message}: {problem}")
        return await self._build(
            language, toolchain, source, sandbox, limits, conventions=conventions,
            headers=headers, extra_flags=extra_flags,
        )  # fmt: skip

    async def _probe(self, language: str, toolchain: Toolchain, sandbox: Sandbox) -> str:
        if language == "python" or language in self._probed:
            return self._probed.get(language, "")  # Python: the scorer's self-test
        async with self._locks.setdefault(f"probe:{language}", asyncio.Lock()):
            if language in self._probed:
                return self._probed[language]
            counts = (self.compiles, self.cache_hits)
            built = await self._build(
                language, toolchain, KNOWN_GOOD[language], sandbox, trust_cached_errors=False
            )
            self.compiles, self.cache_hits = counts  # probes are not rollouts' builds
            if isinstance(built, Judgement):
                if built.verdict is not Verdict.COMPILE_ERROR or "ran out of" in built.message:
                    return ""  # our failure or the load: decides nothing, try next time
                self._probed[language] = f"a known-good program does not compile: {built.message}"
                return self._probed[language]
            run = await built.run(sandbox, stdin=b"1 2\n", limits=PROBE_RUN_LIMITS)
            if run.status is Status.TIME_LIMIT or run.status is Status.SANDBOX_ERROR:
                return ""
            if run.status is Status.OK and run.stdout.split() == [b"3"]:
                self._probed[language] = ""
            else:
                said = tail_text(run.stderr or run.stdout, 500).strip()
                self._probed[language] = f"a known-good program fails ({run.message}): {said}"
            return self._probed[language]

    async def _build(
        self,
        language: str,
        toolchain: Toolchain,
        source: str,
        sandbox: Sandbox,
        limits: Limits = COMPILE_LIMITS,
        *,
        trust_cached_errors: bool = True,
        conventions: Conventions | None = None,
        headers: dict[str, bytes] | None = None,
        extra_flags: tuple[str, ...] = (),
    ) -> Program | Judgement:
        spec = SPECS[language]
        name = spec.source_name(source)
        code = source.encode("utf-8", "surrogatepass")
        if spec.compile is None:
            run_argv = tuple(spec.run(toolchain, name, source))
            if language == "python" and conventions is not None:
                run_argv, files, launcher = python_program(run_argv, code, conventions)
                return Program(language, run_argv, files, spec.env, launcher)
            python = code if language == "python" else None
            stack = conventions.stack_bytes if conventions and language == "javascript" else None
            return Program(language, run_argv, {name: code}, spec.env, python, stack)
        argv = [*spec.compile(toolchain, name), *extra_flags]
        if conventions is not None:
            argv = await asyncio.to_thread(
                apply_conventions, language, toolchain, argv, conventions
            )
        headers = headers or {}
        keyed = list(argv)
        if headers:  # the headers' contents are part of what is compiled
            digests = {n: hashlib.sha256(d).hexdigest() for n, d in sorted(headers.items())}
            keyed.append(json.dumps(digests))
        key = self.cache_key(spec, toolchain, keyed, code, sandbox, limits)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:  # rollouts of one source wait for a single compile
            payload = self._cached(key)
            if payload is not None and not trust_cached_errors and _failed(payload):
                payload = None
            if payload is None:
                compiled = await self._compile(
                    spec, argv, name, {**headers, name: code}, sandbox, limits
                )
                if isinstance(compiled, Judgement):
                    return compiled
                self._store(key, compiled)
                payload = compiled
            else:
                self.cache_hits += 1
        program = self._program(spec, toolchain, name, source, payload)
        if isinstance(program, Program) and conventions is not None:
            return dataclasses.replace(program, stack_bytes=conventions.stack_bytes)
        return program

    @staticmethod
    def cache_key(
        spec: LanguageSpec,
        toolchain: Toolchain,
        argv: list[str],
        code: bytes,
        sandbox: Sandbox,
        limits: Limits,
    ) -> str:
        """The cache key (hex SHA-256) of compiling ``code`` with ``argv``: see the module."""
        where = [sandbox.name, repr(limits), detect_cgroups().version]
        what = [CACHE_VERSION, spec.name, toolchain.fingerprint, argv, spec.outputs, where]
        return hashlib.sha256(json.dumps(what).encode() + code).hexdigest()

    def _program(
        self, spec: LanguageSpec, toolchain: Toolchain, name: str, source: str, payload: bytes
    ) -> Program | Judgement:
        try:
            header, files = parse_outputs(payload)
        except ValueError as error:
            return Judgement(Verdict.SANDBOX_ERROR, message=f"unusable compile output: {error}")
        if header["exit_code"] != 0:
            message = str(header.get("message", "")).strip() or "the compiler failed"
            detail = ErrorDetail("CompileError", message[-2000:], message)
            return Judgement(Verdict.COMPILE_ERROR, error=detail, message=message)
        argv = tuple(spec.run(toolchain, name, source))
        return Program(spec.name, argv, files, spec.env)

    async def _compile(
        self,
        spec: LanguageSpec,
        argv: list[str],
        name: str,
        sources: dict[str, bytes],
        sandbox: Sandbox,
        limits: Limits,
    ) -> bytes | Judgement:
        self.compiles += 1
        job = json.dumps({"argv": argv, "outputs": list(spec.outputs)}).encode()
        run = await sandbox.run(
            RunRequest(
                # The compiler's path as an argument (the driver reads its job from stdin):
                # the sandbox sees a JVM or V8 compiler and spares it RLIMIT_AS.
                argv=[*python_command("execgym_compile.py"), argv[0]],
                stdin=job,
                files={**sources, "execgym_compile.py": self._driver},
                limits=limits,
                env=spec.env,
                want_report=True,
            )
        )
        unstarted = never_started(run, "compiler")
        if unstarted is not None:
            return unstarted
        if run.status is Status.SANDBOX_ERROR:
            return Judgement(Verdict.SANDBOX_ERROR, run, message=run.message)
        if run.status in (Status.TIME_LIMIT, Status.MEMORY_LIMIT):
            what = "time" if run.status is Status.TIME_LIMIT else "memory"
            return Judgement(
                Verdict.COMPILE_ERROR,
                run,
                message=f"the compiler ran out of {what} ({run.message})",
            )
        if run.status is not Status.OK:
            return Judgement(
                Verdict.SANDBOX_ERROR, run, message=f"the compile driver failed: {run.message}"
            )
        return run.report[len(START_MARKER) :]

    def _path(self, key: str) -> Path:
        return self.cache_dir / key[:2] / key

    def _cached(self, key: str) -> bytes | None:
        if not self.use_cache:
            return None
        try:
            return self._path(key).read_bytes()
        except OSError:
            return None

    def _store(self, key: str, payload: bytes) -> None:
        if not self.use_cache:
            return
        import tempfile  # only on a cache miss: not at every command's start (issue 23)

        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as handle:
                handle.write(payload)
            os.replace(handle.name, path)  # readers see a whole entry or none
        except OSError:
            pass  # a cache that cannot be written only costs a recompile
