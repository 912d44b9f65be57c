"""Hot spots: the planted slow function is the top reported function (>= 95 % of programs).

20 programs: five kinds of slow body (an arithmetic loop, nested loops building lists,
string building, a builtin doing the work, naive recursion) in four layouts (called
beside fast helpers, behind a wrapper, beside work in the entry point itself, behind
a method of the same name). The profile ranks the model's functions by self time, a builtin's time
counted to the function that called it.
"""

from __future__ import annotations

import asyncio
import itertools

import pytest

from execgym.diagnostics import Diagnoser, Diagnostics
from execgym.judges.base import Judgement, Verdict
from execgym.limits import Limits
from execgym.sandbox import BubblewrapSandbox
from execgym.tasks.models import Task

SLOW = {
    "arithmetic": "    t = 0\n    for i in range(6000):\n        t += i * i % 7\n    return t\n",
    "nested": "    rows = [[i * j for j in range(60)] for i in range(60)]\n    return len(rows)\n",
    "strings": (
        "    s = ''\n    for i in range(2000):\n        s += chr(65 + i % 26)\n    return len(s)\n"
    ),
    "builtin": "    data = list(range(20000, 0, -1))\n    return sorted(data)[0] + sum(data) % 3\n",
    "recursion": "    return n if n < 2 else planted(x, n - 1) + planted(x, n - 2)\n",
}
FAST = "def fast_a(x):\n    return x + 1\n\n\ndef fast_b(x):\n    return [x] * 3\n\n\n"
LAYOUTS = {
    "beside": "def f(x):\n    return fast_a(x) + planted(x) + len(fast_b(x))\n",
    "wrapped": (
        "def middle(x):\n    return planted(x) + 1\n\n\ndef f(x):\n"
        "    return middle(x) + fast_a(x)\n"
    ),
    "own_work": "def f(x):\n    y = sum(range(50))\n    return planted(x) + y + fast_a(x)\n",
    "method": "class Box:\n    def planted(self, x):\n        return planted(x)\n\n\n"
    "def f(x):\n    return Box().planted(x) + fast_a(x)\n",
}


def program(slow: str, layout: str) -> str:
    return FAST + "def planted(x, n=14):\n" + SLOW[slow] + "\n\n" + LAYOUTS[layout]


LIMITS = Limits(wall_time_s=30.0, cpu_time_s=30.0)  # room for a loaded machine
PROGRAMS = {f"{s}-{layout}": program(s, layout) for s, layout in itertools.product(SLOW, LAYOUTS)}


@pytest.fixture(scope="module")
def hotspots(diag_sandbox: BubblewrapSandbox) -> dict[str, Diagnostics]:
    diagnoser = Diagnoser(("hotspots",))
    passed = Judgement(Verdict.PASSED)
    gate = asyncio.Semaphore(2)

    async def one(name: str, source: str) -> tuple[str, Diagnostics]:
        task = Task(
            task_id=f"hotspots/{name}",
            prompt="# planted\n",
            entry_point="f",
            tests="def check(candidate):\n    for x in (1, 2, 3):\n        candidate(x)\n",
        )
        async with gate:
            found = await diagnoser.diagnose(task, source, diag_sandbox, LIMITS, passed)
        assert found is not None
        return name, found

    async def every() -> dict[str, Diagnostics]:
        return dict(await asyncio.gather(*(one(n, s) for n, s in PROGRAMS.items())))

    return asyncio.run(every())


def test_the_planted_function_is_on_top(hotspots: dict[str, Diagnostics]) -> None:
    tops = {}
    for name, found in hotspots.items():
        section = found.hotspots
        assert section is not None, name
        assert section.status == "measured", (name, section)
        functions = section.data["functions"]
        tops[name] = functions[0]["where"]["function"] if functions else None
    right = sum(top == "planted" for top in tops.values())
    assert len(tops) == 20
    assert right / len(tops) >= 0.95, tops


def test_lines_point_into_the_planted_function(hotspots: dict[str, Diagnostics]) -> None:
    found = hotspots["arithmetic-beside"].hotspots
    assert found is not None
    lines = found.data["lines"]
    assert lines, found.to_json()
    assert lines[0]["where"]["function"] == "planted"
    assert "t += i * i % 7" in lines[0]["where"]["code"] or "for i" in lines[0]["where"]["code"]
    shares = [f["self_share"] for f in found.data["functions"]]
    assert shares == sorted(shares, reverse=True)
    assert 0 < sum(shares) <= 1.0 + 1e-6
