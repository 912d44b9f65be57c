"""Leaks of a C or C++ rollout: a debug build run under valgrind's memcheck.

Why not LeakSanitizer: its leak check stops the program's threads with ``ptrace``
(compiler-rt's ``StopTheWorld``), which the sandbox's seccomp filter refuses (see
SECURITY.md); under the sandbox it dies with "LeakSanitizer has encountered a fatal
error" for every program, leaking or not (tried with GCC 12's ``-fsanitize=address``,
2026-12-02). valgrind's memcheck needs no ``ptrace`` (it runs the program on its own
synthetic CPU, in the same process) and reports each block never freed with its
allocation stack: https://valgrind.org/docs/manual/mc-manual.html#mc-manual.leaks.

The program (``prompt + completion + tests``, as the judge builds it) is compiled with
``-g -O0 -fno-inline -fno-omit-frame-pointer`` after the language's own options, in the
sandbox, and run once in the sandbox under ``valgrind --leak-check=full`` with the
rollout's memory and process limits and its time limits times
:data:`VALGRIND_SLOWDOWN`. A leak counts when its stack has a frame in the model's part
of the source (the lines of ``prompt + completion``, not the tests'); it is reported at
the innermost such frame, per run (``per_call`` is ``None``: calls are not counted).
"Definitely" and "indirectly" lost blocks count; "still reachable" ones (a global
buffer allocated once) do not.

The XML report goes to the harness report channel with a per-run nonce in valgrind's
``--xml-user-comment``; the program shares that channel (it is its own process), so a
report without the nonce, or with more than one document, is the rollout's failure.
"""

from __future__ import annotations

import re
import secrets
import shutil
import xml.etree.ElementTree as ET
from dataclasses import replace

from execgym.judges.base import Judgement
from execgym.judges.compile import Builder, compile_limits_for
from execgym.judges.diagnosis import Leak, Section, Where
from execgym.limits import Limits
from execgym.sandbox import RESERVES_ADDRESS_SPACE_ENV
from execgym.sandbox.base import RunRequest, Sandbox, Status
from execgym.tasks.models import StdioCase, Task

LANGUAGES = ("c", "cpp")
"""The languages with a leak checker (every other language: ``not_applicable``)."""

DEBUG_FLAGS = ("-g", "-O0", "-fno-inline", "-fno-omit-frame-pointer")
VALGRIND_SLOWDOWN = 20.0
"""Time limits of the valgrind run, as a multiple of the rollout's (memcheck's own
manual gives 20-30x for its slowdown)."""

_LAUNCH = (
    'cp -- "$0" ./.execgym-exe && chmod 700 ./.execgym-exe && exec "$VALGRIND" -q '
    "--leak-check=full --show-leak-kinds=definite,indirect --errors-for-leak-kinds=none "
    '--xml=yes --xml-fd=3 --xml-user-comment="$EXECGYM_NONCE" ./.execgym-exe'
)


def source_of(task: Task, completion: str) -> tuple[str, int]:
    """The program the judge builds, and the last line number of the model's part."""
    model = task.prompt + completion
    if task.kind == "stdio":
        return completion, completion.count("\n") + 1
    return model + "\n" + (task.tests or ""), model.count("\n") + 1


async def native_leaks(
    task: Task, completion: str, sandbox: Sandbox, limits: Limits, builder: Builder
) -> Section:
    """The ``leaks`` section of a C/C++ rollout (see the module docstring).

    Raises:
        SandboxSetupFailed: if the sandbox could not be set up at all.
    """
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return Section("not_applicable", "valgrind is not installed (apt-get install valgrind)")
    source, model_lines = source_of(task, completion)
    built = await builder.build(
        task.language, source, sandbox, task.compile_limits_over(compile_limits_for(limits)),
        conventions=task.conventions, extra_flags=DEBUG_FLAGS,
    )  # fmt: skip
    if isinstance(built, Judgement):
        return Section("failed", f"the debug build failed: {built.message}"[:500], "rollout")
    nonce = secrets.token_hex(16)
    stdin = b""
    if task.kind == "stdio":
        case = next((c for c in task.test_cases if isinstance(c, StdioCase)), None)
        stdin = case.input.encode() if case else b""
    slow = replace(
        limits,
        wall_time_s=limits.wall_time_s * VALGRIND_SLOWDOWN,
        cpu_time_s=limits.cpu_time_s * VALGRIND_SLOWDOWN,
    )
    env = {
        **built.env,
        RESERVES_ADDRESS_SPACE_ENV[0]: RESERVES_ADDRESS_SPACE_ENV[1],
        "VALGRIND": valgrind,
        "EXECGYM_NONCE": nonce,
    }
    request = RunRequest(
        argv=["/bin/sh", "-c", _LAUNCH, "main"], stdin=stdin, files=dict(built.files),
        limits=slow, env=env, want_report=True,
    )  # fmt: skip
    run = await sandbox.run(request)
    if run.status is Status.SANDBOX_ERROR:
        return Section("failed", f"the valgrind run failed: {run.message}"[:500], "host")
    if run.status is not Status.OK and run.status is not Status.RUNTIME_ERROR:
        return Section("failed", f"the valgrind run ended: {run.message}"[:500], "rollout")
    return _parse(run.report, nonce, model_lines)


def _parse(report: bytes, nonce: str, model_lines: int) -> Section:
    text = report.decode("utf-8", "replace")
    if text.count("<valgrindoutput>") != 1 or f"<usercomment>{nonce}</usercomment>" not in text:
        return Section("failed", "no valgrind report of this run (or more than one)", "rollout")
    try:
        root = ET.fromstring(text[text.index("<?xml") :] if "<?xml" in text else text)  # noqa: S314
    except ET.ParseError as error:
        return Section("failed", f"valgrind's report does not parse: {error}", "rollout")
    found: list[Leak] = []
    for item in root.iter("error"):
        kind = item.findtext("kind") or ""
        if not kind.startswith("Leak_"):
            continue
        frame = next(
            (
                f
                for f in item.iter("frame")
                if re.fullmatch(r"main\.c(pp)?", f.findtext("file") or "")
                and 0 < int(f.findtext("line") or 0) <= model_lines
            ),
            None,
        )
        if frame is None:
            continue  # allocated by the tests' code or a library, not the model's
        size = float(item.findtext("xwhat/leakedbytes") or 0)
        blocks = int(item.findtext("xwhat/leakedblocks") or 0)
        spot = Where(
            str(frame.findtext("file")),
            int(frame.findtext("line") or 0),
            frame.findtext("fn") or "",
        )
        what = f"{int(size)} B in {blocks} blocks never freed ({kind[5:].lower()})"
        found.append(Leak("native", spot, what, None, size, "bytes"))
    reason = f"{len(found)} leak(s) in the model's code" if found else "none in the model's code"
    return Section(
        "measured", reason, tool="valgrind memcheck (debug build)",
        data={"found": [leak.to_json() for leak in found], "calls": None},
    )  # fmt: skip
