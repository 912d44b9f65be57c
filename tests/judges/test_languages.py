"""Every language through the stdio and assert judges, the compile step and its cache.

Each language gets a right answer, a wrong one and (where compiled) one that does not
compile. A toolchain missing here is a skip locally and a failure in CI.
"""

from __future__ import annotations

import shutil

import pytest

from execgym.judges import Verdict
from execgym.judges.assert_native import NativeAssertJudge
from execgym.judges.compile import Builder
from execgym.judges.stdio import StdioJudge
from execgym.limits import Limits, MiB
from execgym.sandbox import BubblewrapSandbox
from execgym.sandbox.bwrap import interpreter_paths
from execgym.tasks import Task
from execgym.testing import SUM_OF_TWO
from execgym.toolchains import find_toolchain
from tests.conftest import require

LIMITS = Limits(wall_time_s=5, memory_bytes=1024 * MiB)
SUM = Task.model_validate(
    {
        "task_id": "t/sum",
        "kind": "stdio",
        "test_cases": [{"input": "1 2\n", "output": "3\n"}, {"input": "40 2", "output": "42"}],
    }
)

RIGHT = SUM_OF_TWO
WRONG = {
    "c": RIGHT["c"].replace("a+b", "a-b"),
    "cpp": RIGHT["cpp"].replace("a+b", "a*b"),
    "java": RIGHT["java"].replace("s.nextLong() + s.nextLong()", "s.nextLong()"),
    "javascript": RIGHT["javascript"].replace("a + b", "a - b"),
    "rust": RIGHT["rust"].replace("v[0] + v[1]", "v[0]"),
    "bash": "read a b\necho $((a * b))\n",
    "go": RIGHT["go"].replace("a + b", "a - b"),
    "python": "print(3)\n",
}
BROKEN = {
    "c": "int main(void) { return undefined_thing; }\n",
    "cpp": "int main() { std::vector<int> v; }\n",
    "java": "public class Main { public static void main(String[] a) { int x = ; } }\n",
    "rust": 'fn main() { let x: i32 = "no"; }\n',
    "go": "package main\nfunc main() { x := 1 }\n",
}
LANGUAGES = sorted(RIGHT)


def needs(language: str) -> None:
    require(find_toolchain(language) is not None, f"the {language} toolchain")


async def stdio(sandbox, builder, language: str, source: str):
    task = SUM.model_copy(update={"language": language})
    return await StdioJudge(builder).judge(task, source, sandbox, LIMITS)


@pytest.mark.parametrize("language", LANGUAGES)
async def test_stdio_right_and_wrong_answers(bwrap_sandbox, builder, language: str) -> None:
    needs(language)
    right = await stdio(bwrap_sandbox, builder, language, RIGHT[language])
    assert right.verdict is Verdict.PASSED, right.message
    assert right.details["fraction_passed"] == 1.0
    wrong = await stdio(bwrap_sandbox, builder, language, WRONG[language])
    assert wrong.verdict is Verdict.FAILED, wrong.message


@pytest.mark.parametrize("language", sorted(BROKEN))
async def test_compile_errors_carry_the_compilers_message(
    bwrap_sandbox, builder, language: str
) -> None:
    needs(language)
    judgement = await stdio(bwrap_sandbox, builder, language, BROKEN[language])
    assert judgement.verdict is Verdict.COMPILE_ERROR
    assert judgement.error is not None
    assert judgement.error.type == "CompileError"
    assert "main" in judgement.message  # the compiler names the file and line
    assert judgement.verdict.is_masked is False


async def test_the_compile_cache_compiles_a_source_once(bwrap_sandbox, tmp_path) -> None:
    needs("c")
    builder = Builder(tmp_path)
    source = RIGHT["c"] + "/* a rollout */\n"  # not the probe's own source
    for _ in range(3):
        assert (await stdio(bwrap_sandbox, builder, "c", source)).verdict is Verdict.PASSED
    assert (builder.compiles, builder.cache_hits) == (1, 2)
    fresh = Builder(tmp_path)  # the cache is on disk: a new process reuses it too
    assert (await stdio(bwrap_sandbox, fresh, "c", source)).verdict is Verdict.PASSED
    assert fresh.compiles == 0
    again = await stdio(bwrap_sandbox, fresh, "c", BROKEN["c"])
    assert again.verdict is Verdict.COMPILE_ERROR
    assert (await stdio(bwrap_sandbox, fresh, "c", BROKEN["c"])).message == again.message
    assert fresh.compiles == 1  # compile errors are cached as well


async def test_a_missing_toolchain_is_language_unavailable(
    bwrap_sandbox, builder, monkeypatch
) -> None:
    monkeypatch.setattr("execgym.judges.compile.find_toolchain", lambda language: None)
    judgement = await stdio(bwrap_sandbox, builder, "rust", RIGHT["rust"])
    assert judgement.verdict is Verdict.LANGUAGE_UNAVAILABLE
    assert judgement.verdict.is_masked
    assert "rust" in judgement.message


async def test_compile_limits_are_their_own(bwrap_sandbox, tmp_path) -> None:
    """A compiler fed endless input is stopped by the compile step's own limits."""
    needs("c")
    task = Task.model_validate(
        SUM.model_dump()
        | {"language": "c", "compile_limits": {"wall_time_s": 2, "memory_bytes": 256 * MiB}}
    )
    source = '#include "/dev/zero"\nint main(void) { return 0; }\n'
    judgement = await StdioJudge(Builder(tmp_path)).judge(task, source, bwrap_sandbox, LIMITS)
    assert judgement.verdict is Verdict.COMPILE_ERROR
    # A cgroup stops the compiler ("the compiler ran out of memory/time"); where only
    # RLIMIT_AS limits memory (an ordinary user's v1 host), its allocation fails and
    # cc1 says so itself ("cc1: out of memory allocating ...").
    message = judgement.message
    assert "the compiler ran out of" in message or "out of memory" in message, message


ASSERT_TESTS = {
    "c": (
        "#include <assert.h>\nint add(int a, int b) {\n",
        "int main(void) { assert(add(2, 3) == 5); }\n",
    ),
    "cpp": (
        "#include <cassert>\nint add(int a, int b) {\n",
        "int main() { assert(add(2, 3) == 5); }\n",
    ),
    "java": (
        "class Solution {\n  int add(int a, int b) {\n",
        "public class Main {\n  public static void main(String[] x) {\n"
        '    if (new Solution().add(2, 3) != 5) throw new AssertionError("add");\n  }\n}\n',
    ),
    "javascript": (
        "const add = (a, b) => {\n",
        "const assert = require('node:assert');\nassert.deepEqual(add(2, 3), 5);\n",
    ),
    "rust": ("fn add(a: i32, b: i32) -> i32 {\n", "fn main() { assert_eq!(add(2, 3), 5); }\n"),
    "bash": ("add() {\n", '[ "$(add 2 3)" = 5 ] || exit 1\n'),
    "go": (
        'package main\n\nimport "os"\n\nfunc add(a, b int) int {\n',
        "func main() {\n\tif add(2, 3) != 5 {\n\t\tos.Exit(1)\n\t}\n}\n",
    ),
}
ASSERT_BODIES = {
    "c": ("    return a + b;\n}\n", "    return a - b;\n}\n"),
    "cpp": ("    return a + b;\n}\n", "    return a * b;\n}\n"),
    "java": ("    return a + b;\n  }\n}\n", "    return a;\n  }\n}\n"),
    "javascript": ("  return a + b;\n};\n", "  return a - b;\n};\n"),
    "rust": ("    a + b\n}\n", "    a - b\n}\n"),
    "bash": ("  echo $(($1 + $2))\n}\n", "  echo $(($1 - $2))\n}\n"),
    "go": ("\treturn a + b\n}\n", "\treturn a - b\n}\n"),
}


@pytest.mark.parametrize("language", sorted(ASSERT_TESTS))
async def test_assert_tasks_in_other_languages(bwrap_sandbox, builder, language: str) -> None:
    needs(language)
    prompt, tests = ASSERT_TESTS[language]
    task = Task(task_id=f"x/{language}", prompt=prompt, tests=tests, language=language)
    right, wrong = ASSERT_BODIES[language]
    judge = NativeAssertJudge(builder)
    passed = await judge.judge(task, right, bwrap_sandbox, LIMITS)
    assert passed.verdict is Verdict.PASSED, passed.message
    failed = await judge.judge(task, wrong, bwrap_sandbox, LIMITS)
    assert failed.verdict is Verdict.FAILED, failed.message


async def test_a_toolchain_broken_inside_the_sandbox_is_masked_not_blamed(tmp_path) -> None:
    """Without its host directories bound, rustc cannot run in the sandbox: the probe
    finds out, and the rollout is ``language_unavailable`` rather than ``compile_error``."""
    needs("rust")
    require(shutil.which("bwrap") is not None, "bubblewrap")
    bare = BubblewrapSandbox(read_only_paths=interpreter_paths())
    builder = Builder(tmp_path)
    judgement = await stdio(bare, builder, "rust", RIGHT["rust"])
    assert judgement.verdict is Verdict.LANGUAGE_UNAVAILABLE
    assert judgement.verdict.is_masked
    assert "does not work in the bwrap sandbox" in judgement.message
    assert builder.compiles == 0
    assert (
        await stdio(bare, builder, "rust", RIGHT["rust"])
    ).verdict is Verdict.LANGUAGE_UNAVAILABLE


async def test_console_assert_fails_a_javascript_assert_task(bwrap_sandbox, builder) -> None:
    """HumanEval-X's JavaScript tests use console.assert, which Node only logs."""
    needs("javascript")
    task = Task(
        task_id="x/console",
        prompt="const add = (a, b) => {\n",
        tests="const t = () => {\n  console.assert(add(2, 3) === 5)\n}\nt()\n",
        language="javascript",
    )
    judge = NativeAssertJudge(builder)
    assert (await judge.judge(task, "  return a + b;\n};\n", bwrap_sandbox, LIMITS)).verdict is (
        Verdict.PASSED
    )
    failed = await judge.judge(task, "  return 0;\n};\n", bwrap_sandbox, LIMITS)
    assert failed.verdict is Verdict.FAILED
    assert "Assertion failed" in failed.message


async def test_a_cached_failure_of_the_probe_does_not_make_a_language_unavailable(
    bwrap_sandbox, tmp_path
) -> None:
    """A compile that failed where it ran before (an older execgym, other limits: the
    JVM under RLIMIT_AS, say) is cached like any compile error; the toolchain probe
    compiles its known-good program again instead of believing that failure."""
    from execgym.judges.compile import COMPILE_LIMITS
    from execgym.judges.languages import KNOWN_GOOD, SPECS

    needs("c")
    spec, toolchain = SPECS["c"], find_toolchain("c")
    first = Builder(tmp_path)
    failed = await first.build("c", "int main(void) { return }\n", bwrap_sandbox)
    assert failed.verdict is Verdict.COMPILE_ERROR, failed
    argv = spec.compile(toolchain, spec.source_name(KNOWN_GOOD["c"]))
    good = Builder.cache_key(
        spec, toolchain, argv, KNOWN_GOOD["c"].encode(), bwrap_sandbox, COMPILE_LIMITS
    )
    poisoned = tmp_path / good[:2] / good
    assert poisoned.is_file()  # the probe's own compile, cached
    errors = [path for path in tmp_path.rglob("*") if path.is_file() and path != poisoned]
    assert len(errors) == 1, errors  # the compile error, cached too
    poisoned.write_bytes(errors[0].read_bytes())
    assert (await Builder(tmp_path)._build("c", toolchain, KNOWN_GOOD["c"], bwrap_sandbox)).verdict
    # ... a failure now, for anything that trusts the cache; not for the probe:
    second = Builder(tmp_path)
    program = await second.build("c", KNOWN_GOOD["c"], bwrap_sandbox)
    assert not hasattr(program, "verdict"), program  # a Program: the probe recompiled
    judgement = await stdio(bwrap_sandbox, second, "c", KNOWN_GOOD["c"])
    assert judgement.verdict is Verdict.PASSED, judgement.message


async def test_the_compile_cache_is_keyed_by_where_the_compile_ran(bwrap_sandbox) -> None:
    from execgym.judges.languages import SPECS

    needs("c")
    spec, toolchain = SPECS["c"], find_toolchain("c")
    key = Builder.cache_key
    base = key(spec, toolchain, ["cc", "x.c"], b"int main;", bwrap_sandbox, LIMITS)
    other_limits = key(
        spec, toolchain, ["cc", "x.c"], b"int main;", bwrap_sandbox, LIMITS.merged(wall_time_s=9)
    )
    none = type("Named", (), {"name": "none"})()
    other_backend = key(spec, toolchain, ["cc", "x.c"], b"int main;", none, LIMITS)
    assert len({base, other_limits, other_backend}) == 3
