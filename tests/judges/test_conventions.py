"""Contest judges' language conventions (issue 17), each overridable per task.

Sources (see ``execgym.tasks.models.Conventions``): AtCoder's language table
(atcoder.jp/contests/abc262/rules: ``g++-12 -std=gnu++20 -DONLINE_JUDGE -DATCODER``, the
stack set to the memory limit for Java and Node); DOMjudge at GCPC/NWERC
(gcpc.nwerc.eu/system: ``-std=gnu++2b``/``-std=gnu2x`` with ``-DONLINE_JUDGE``; C, C++ and
Python stacks "limited only by the total amount of memory"); Kattis problemtools
(github.com/Kattis/problemtools a185fe9741dd, ``problemtools/config/languages.yaml``:
``-std=gnu++23``). Each test here fails on the main of 2026-12-02 but the guards named so
(a Python thread's recursion stays bounded by memory; ``__future__`` imports still work).
"""

from __future__ import annotations

import pytest

from execgym.judges import Verdict
from execgym.judges.assert_native import NativeAssertJudge
from execgym.judges.stdio import StdioJudge
from execgym.limits import Limits, MiB
from execgym.sandbox import WarmPoolSandbox
from execgym.tasks import Task
from tests.judges.test_languages import needs

LIMITS = Limits(wall_time_s=10, memory_bytes=256 * MiB)


def task(language: str, cases, **fields) -> Task:
    return Task.model_validate(
        {
            "task_id": f"t/{language}",
            "kind": "stdio",
            "language": language,
            "test_cases": [{"input": i, "output": o} for i, o in cases],
            **fields,
        }
    )


async def judge(sandbox, builder, language: str, source: str, cases, **fields):
    return await StdioJudge(builder).judge(task(language, cases, **fields), source, sandbox, LIMITS)


# ---- Python: exit()/quit() and unlimited int digits, on both Python tiers -------------

PY_EXIT = [
    "print(int(input()) * 2)\nexit()\n",
    "print(int(input()) * 2)\nquit()\n",
    "n = int(input())\nprint(n * 2)\nexit(0)\nprint('never')\n",
    "import sys\nprint(int(input()) * 2)\nsys.exit()\n",
]
HUGE = "n = int(input())\nprint(10 ** n)\n"  # 5000 digits: past CPython's 4300 default


@pytest.fixture(params=["bwrap", "warm_pool"])
async def python_sandbox(request, bwrap_sandbox):
    if request.param == "bwrap":
        yield bwrap_sandbox
        return
    async with WarmPoolSandbox() as pool:
        yield pool


async def test_python_conventions(python_sandbox, builder) -> None:
    for source in PY_EXIT:
        judgement = await judge(python_sandbox, builder, "python", source, [("21\n", "42\n")])
        assert judgement.verdict is Verdict.PASSED, (source, judgement.message)
    quitting = "print(1)\nexit(3)\n"
    failed = await judge(python_sandbox, builder, "python", quitting, [("", "1\n")])
    assert failed.verdict is Verdict.ERROR  # a non-zero exit is still a runtime error
    big = await judge(python_sandbox, builder, "python", HUGE, [("5000\n", "1" + "0" * 5000)])
    assert big.verdict is Verdict.PASSED, big.message
    reads = "print(int(input()) % 1000)\n"
    assert (
        await judge(python_sandbox, builder, "python", reads, [("9" * 6000, "999")])
    ).verdict is Verdict.PASSED
    traceback = await judge(
        python_sandbox, builder, "python", "x = 1\nraise ValueError('at 2')\n", [("", "")]
    )
    assert traceback.verdict is Verdict.ERROR
    assert "ValueError: at 2" in traceback.message
    assert 'File "main.py", line 2' in traceback.run.stderr.decode()  # its own line numbers


async def test_python_conventions_can_be_turned_off(bwrap_sandbox, builder) -> None:
    off = {"conventions": {"python_exit": False, "python_int_max_str_digits": 4300}}
    judgement = await judge(bwrap_sandbox, builder, "python", PY_EXIT[0], [("21\n", "42\n")], **off)
    assert judgement.verdict is Verdict.ERROR
    assert "NameError" in judgement.message
    big = await judge(bwrap_sandbox, builder, "python", HUGE, [("5000\n", "1" + "0" * 5000)], **off)
    assert big.verdict is Verdict.ERROR
    assert "ValueError" in big.message


async def test_python_future_imports_and_main_guard_still_work(bwrap_sandbox, builder) -> None:
    source = (
        "from __future__ import annotations\n"
        "def f(x: Undefined) -> int:\n    return x + 1\n"
        "if __name__ == '__main__':\n    print(f(int(input())))\n"
    )
    judgement = await judge(bwrap_sandbox, builder, "python", source, [("1\n", "2\n")])
    assert judgement.verdict is Verdict.PASSED, judgement.message


# ---- C and C++: the newest standard, ONLINE_JUDGE --------------------------------------

CPP20 = r"""
#include <algorithm>
#include <iostream>
#include <map>
#include <ranges>
#include <vector>
int main() {
    std::vector<int> v{3, 1, 2};
    std::ranges::sort(v);
    std::map<int, int> m{{1, 2}};
    std::cout << v[0] << v[2] << m.contains(1) << (__cplusplus >= 202002L) << "\n";
}
"""
C_STD = '#include <stdio.h>\nint main(void) { printf("%d\\n", __STDC_VERSION__ > 201710L); }\n'
GUARD = {
    "c": "#include <stdio.h>\nint main(void) {\n#ifndef ONLINE_JUDGE\n"
    '    freopen("input.txt", "r", stdin);\n#endif\n'
    '    int a; scanf("%d", &a); printf("%d\\n", a * 2);\n}\n',
    "cpp": "#include <cstdio>\n#include <iostream>\nint main() {\n#ifndef ONLINE_JUDGE\n"
    '    freopen("input.txt", "r", stdin);\n#endif\n'
    "    int a; std::cin >> a; std::cout << a * 2 << '\\n';\n}\n",
}


async def test_cpp_compiles_at_the_newest_standard(bwrap_sandbox, builder) -> None:
    needs("cpp")
    judgement = await judge(bwrap_sandbox, builder, "cpp", CPP20, [("", "1311")])
    assert judgement.verdict is Verdict.PASSED, judgement.message
    old = {"conventions": {"cpp_std": "gnu++17"}}
    judgement = await judge(bwrap_sandbox, builder, "cpp", CPP20, [("", "1311")], **old)
    assert judgement.verdict is Verdict.COMPILE_ERROR  # overridable per task


async def test_c_compiles_at_the_newest_standard(bwrap_sandbox, builder) -> None:
    needs("c")
    judgement = await judge(bwrap_sandbox, builder, "c", C_STD, [("", "1")])
    assert judgement.verdict is Verdict.PASSED, judgement.message
    old = await judge(
        bwrap_sandbox, builder, "c", C_STD, [("", "0")], conventions={"c_std": "gnu17"}
    )
    assert old.verdict is Verdict.PASSED, old.message


@pytest.mark.parametrize("language", ["c", "cpp"])
async def test_online_judge_is_defined(bwrap_sandbox, builder, language: str) -> None:
    needs(language)
    judgement = await judge(bwrap_sandbox, builder, language, GUARD[language], [("21\n", "42\n")])
    assert judgement.verdict is Verdict.PASSED, judgement.message
    off = {"conventions": {"online_judge": False}}
    judgement = await judge(
        bwrap_sandbox, builder, language, GUARD[language], [("21\n", "42\n")], **off
    )
    assert judgement.verdict is not Verdict.PASSED  # it reads input.txt, which is not there


ASSERT_CPP = (
    "#include <algorithm>\n#include <cassert>\n#include <vector>\n",
    "int main() {\n    std::vector<int> v{3, 1, 2};\n    assert(first_sorted(v) == 1);\n"
    "#ifndef ONLINE_JUDGE\n    assert(false);\n#endif\n}\n",
)


async def test_the_native_assert_judge_follows_the_conventions(bwrap_sandbox, builder) -> None:
    needs("cpp")
    prompt, tests = ASSERT_CPP
    cpp = Task(task_id="x/cpp20", prompt=prompt, tests=tests, language="cpp")
    body = (
        "int first_sorted(std::vector<int> v) {\n    std::ranges::sort(v);\n    return v[0];\n}\n"
    )
    judgement = await NativeAssertJudge(builder).judge(cpp, body, bwrap_sandbox, LIMITS)
    assert judgement.verdict is Verdict.PASSED, judgement.message


# ---- The stack of compiled programs is the memory limit --------------------------------

DEEP = {
    "c": "#include <stdio.h>\n"
    "long depth(long n) { volatile char pad[100]; pad[0] = (char)n;\n"
    "    if (n == 0) return 0; long r = depth(n - 1); return r + 1 + (pad[0] & 0); }\n"
    'int main(void) { long n; scanf("%ld", &n); printf("%ld\\n", depth(n)); }\n',
    "cpp": "#include <iostream>\n"
    "long depth(long n) { volatile char pad[100]; pad[0] = (char)n;\n"
    "    if (n == 0) return 0; long r = depth(n - 1); return r + 1 + (pad[0] & 0); }\n"
    "int main() { long n; std::cin >> n; std::cout << depth(n) << '\\n'; }\n",
    "rust": "use std::io::Read;\n"
    "fn depth(n: u64) -> u64 { let pad = [n as u8; 100]; let pad = std::hint::black_box(pad);\n"
    "    if n == 0 { return 0; }\n"
    "    let r = depth(n - 1); r + 1 + (std::hint::black_box(pad)[0] & 0) as u64 }\n"
    "fn main() { let mut s = String::new(); std::io::stdin().read_to_string(&mut s).unwrap();\n"
    '    println!("{}", depth(s.trim().parse().unwrap())); }\n',
}
DEPTH = "1000000"  # about 130 MiB of stack: far past the default 8 MiB


@pytest.mark.parametrize("language", sorted(DEEP))
async def test_deep_recursion_is_bounded_by_memory_not_the_default_stack(
    bwrap_sandbox, builder, language: str
) -> None:
    needs(language)
    deep = await judge(bwrap_sandbox, builder, language, DEEP[language], [(DEPTH, DEPTH)])
    assert deep.verdict is Verdict.PASSED, deep.message
    default = {"conventions": {"stack_bytes": None}}
    small = await judge(
        bwrap_sandbox, builder, language, DEEP[language], [(DEPTH, DEPTH)], **default
    )
    assert small.verdict is Verdict.ERROR, small.message  # overridable: 8 MiB, a crash
    endless = await judge(bwrap_sandbox, builder, language, DEEP[language], [("-1", "0")])
    assert endless.verdict in (Verdict.MEMORY_EXCEEDED, Verdict.ERROR), endless.message
    assert endless.verdict is not Verdict.SANDBOX_ERROR


async def test_deep_recursion_in_the_native_assert_judge(bwrap_sandbox, builder) -> None:
    needs("cpp")
    prompt = "#include <cassert>\n"
    tests = "int main() { assert(depth(1000000) == 1000000); }\n"
    body = DEEP["cpp"].split("\n", 1)[1].split("int main")[0]
    cpp = Task(task_id="x/deep", prompt=prompt, tests=tests, language="cpp")
    judgement = await NativeAssertJudge(builder).judge(cpp, body, bwrap_sandbox, LIMITS)
    assert judgement.verdict is Verdict.PASSED, judgement.message


PY_THREAD = """
import sys, threading
sys.setrecursionlimit(10 ** 8)
threading.stack_size(200 * 2 ** 20)
def depth(n):
    return 0 if n == 0 else depth(n - 1) + 1
def main():
    print(depth(int(input())))
thread = threading.Thread(target=main)
thread.start()
thread.join()
"""


async def test_deep_recursion_in_a_python_thread_is_bounded_by_memory(
    bwrap_sandbox, builder
) -> None:
    """The contest idiom (a thread with a large stack) works, and recursion without end
    stops at the memory limit, a verdict of the model's: never a mask."""
    deep = await judge(bwrap_sandbox, builder, "python", PY_THREAD, [("300000", "300000")])
    assert deep.verdict is Verdict.PASSED, deep.message
    endless = await judge(bwrap_sandbox, builder, "python", PY_THREAD, [("100000000", "0")])
    assert endless.verdict in (Verdict.MEMORY_EXCEEDED, Verdict.ERROR), endless.message


async def test_a_standard_the_compiler_does_not_know_is_the_tasks_fault(bwrap_sandbox) -> None:
    """Not every rollout's compile_error: the task is unusable here (invalid, masked)."""
    from execgym import Rollout, Scorer

    needs("cpp")
    bad = task("cpp", [("", "1311")], conventions={"cpp_std": "gnu++99"})
    scorer = Scorer({bad.task_id: bad}, bwrap_sandbox, LIMITS)
    (result,) = await scorer.score([Rollout(task_id=bad.task_id, completion=CPP20)])
    assert result.verdict is Verdict.INVALID, result.message
    assert result.reward is None
    assert "conventions.cpp_std 'gnu++99'" in result.message


@pytest.mark.parametrize(
    "conventions",
    [
        {"python_int_max_str_digits": 100},  # sys.set_int_max_str_digits refuses 1..639
        {"stack_bytes": 4096},
        {"stack_bytes": "unlimited"},
        {"cpp_std": "gnu++20 -fplugin=x"},  # a flag, not a standard
    ],
)
def test_conventions_a_task_cannot_use_are_refused_when_it_is_read(conventions) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        task("cpp", [("", "")], conventions=conventions)


DEEP_JS = (
    "const n = Number(require('fs').readFileSync(0, 'utf8'));\n"
    "function depth(k) { return k === 0 ? 0 : depth(k - 1) + 1; }\n"
    "console.log(depth(n));\n"
)


async def test_deep_recursion_in_node_is_bounded_by_memory(bwrap_sandbox, builder) -> None:
    needs("javascript")
    deep = await judge(bwrap_sandbox, builder, "javascript", DEEP_JS, [("200000", "200000")])
    assert deep.verdict is Verdict.PASSED, deep.message  # Node's default: RangeError at ~10^4
    default = {"conventions": {"stack_bytes": None}}
    small = await judge(
        bwrap_sandbox, builder, "javascript", DEEP_JS, [("200000", "200000")], **default
    )
    assert small.verdict is Verdict.ERROR, small.message
    assert b"Maximum call stack size exceeded" in small.run.stderr
    endless = await judge(bwrap_sandbox, builder, "javascript", DEEP_JS, [("-1", "0")])
    assert endless.verdict in (Verdict.ERROR, Verdict.MEMORY_EXCEEDED), endless.message
