"""The warm pool's launch path: work moved from every run's fork into the zygote, once.

Each run's fork of the zygote pays for every page it writes (copy on write) and every
Python object it makes, so set-up that is the same for every run is done by the zygote
itself and inherited (docs/benchmarks.md, "Where the warm pool's CPU goes"). These tests
hold the properties a run had when it did that work itself.
"""

from __future__ import annotations

import json
from pathlib import Path

from execgym.sandbox import Status, WarmPoolSandbox
from execgym.sandbox.pool._control import ZYGOTE_BOOTSTRAP
from tests.conftest import descendants

READS_ITS_CAPABILITIES = (
    b"import json\n"
    b"print(json.dumps({line.split(':')[0]: line.split()[1] for line in"
    b" open('/proc/self/status') if line.startswith('Cap')}))\n"
)


def _zygote_pid(pool: WarmPoolSandbox) -> int:
    """The host pid of the pool's zygote (the first Python process running its bootstrap)."""
    assert pool._zygote.proc is not None
    tree = descendants(pool._zygote.proc.pid)
    bootstrap = ZYGOTE_BOOTSTRAP.encode()
    zygotes = []
    for pid in tree:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # a run that ended meanwhile
        if bootstrap in argv and not argv[0].endswith(b"bwrap"):  # bwrap's argv has it too
            zygotes.append(pid)
    # Staged inits are forks of the zygote, with its command line: the zygote is the
    # one whose parent is not one of them.
    parents = {}
    for pid in zygotes:
        stat = Path(f"/proc/{pid}/stat").read_text()
        parents[pid] = int(stat[stat.rindex(")") + 2 :].split()[1])
    (zygote,) = [pid for pid in zygotes if parents[pid] not in zygotes]
    return zygote


async def test_the_zygote_drops_the_bounding_set_once_for_every_run(bwrap_sandbox) -> None:
    # Every run's process used to drop the 64 capabilities of its bounding set itself
    # (64 prctl calls through ctypes in each fork, 0.24 ms); the zygote, which never
    # execs, now drops them once, and its runs inherit the empty set.
    async with WarmPoolSandbox() as pool:
        first = await pool.run_python(READS_ITS_CAPABILITIES)
        again = await pool.run_python(READS_ITS_CAPABILITIES)  # a staged init's
        status = Path(f"/proc/{_zygote_pid(pool)}/status").read_text()
    for result in (first, again):
        assert result.status is Status.OK, result.stderr
        caps = json.loads(result.stdout)
        assert int(caps["CapBnd"], 16) == 0, caps
        assert int(caps["CapEff"], 16) == int(caps["CapPrm"], 16) == 0, caps
    bounding = next(line for line in status.splitlines() if line.startswith("CapBnd:"))
    assert int(bounding.split()[1], 16) == 0, bounding
    effective = next(line for line in status.splitlines() if line.startswith("CapEff:"))
    assert int(effective.split()[1], 16) != 0, effective  # it still sets runs up


async def test_each_run_has_exactly_its_own_environment(bwrap_sandbox) -> None:
    # The zygote now keeps the environment of the last run it started, and a run's
    # process refills its own only when it differs: a variable of one run must never
    # reach the next, staged before or after, nor a value change be missed.
    code = b"import json, os; print(json.dumps(list(os.environ.items())))"
    async with WarmPoolSandbox() as pool:
        plain = await pool.run_python(code)
        asked = await pool.run_python(code, env={"ONLY_HERE": "1", "HOME": "/elsewhere"})
        after = await pool.run_python(code)
        other = await pool.run_python(code, env={"ONLY_HERE": "2"})
        last = await pool.run_python(code)
    runs = [json.loads(result.stdout) for result in (plain, asked, after, other, last)]
    assert (dict(runs[1])["ONLY_HERE"], dict(runs[1])["HOME"]) == ("1", "/elsewhere")
    assert (dict(runs[3])["ONLY_HERE"], dict(runs[3])["HOME"]) == ("2", "/work")
    assert runs[2] == runs[4] == runs[0]  # the same items, in the same order
    assert "ONLY_HERE" not in dict(runs[0])


async def test_the_zygote_carries_only_what_runs_commonly_need(bwrap_sandbox) -> None:
    # Every run's processes, and every call's fork of a loaded solution, are forks of
    # the zygote's image: each MiB and mapping it holds costs each fork (page tables
    # copied, then torn down). It preloaded dataclasses (with inspect, ast, dis),
    # hashlib (OpenSSL), random, decimal, fractions and statistics, which no guest
    # code uses and few programs import (2.2 MiB and 42 mappings in all). A program
    # that wants them imports them: random is then seeded afresh in each run.
    heavy = ["ast", "dataclasses", "decimal", "fractions", "hashlib", "inspect", "random"]
    heavy.append("statistics")
    code = (
        b"import json, os, sys\n"
        b"loaded = sorted(sys.modules)\n"
        b"import dataclasses, hashlib, random, statistics\n"
        b"digest = hashlib.sha256(b'x').hexdigest()[:8]\n"
        b"print(json.dumps([loaded, digest, random.random(), sorted(os.environ)]))\n"
    )
    async with WarmPoolSandbox() as pool:
        first, second = [await pool.run_python(code, env={"RUN": "1"}) for _ in range(2)]
        environ = Path(f"/proc/{_zygote_pid(pool)}/environ").read_bytes().split(b"\0")
    runs = []
    for result in (first, second):
        assert result.status is Status.OK, result.stderr
        runs.append(json.loads(result.stdout))
    assert [name for name in heavy if name in runs[0][0]] == []
    assert runs[0][1] == runs[1][1] == "2d711642"
    assert runs[0][2] != runs[1][2]  # random, imported by each run, seeded by each
    # The zygote binds every symbol of libpython and libc once at its start, so a fork
    # does not write a PLT slot the first time it calls a function; a run's programs
    # get the run's environment, without it.
    assert b"LD_BIND_NOW=1" in environ
    assert "RUN" in runs[0][3]
    assert "LD_BIND_NOW" not in runs[0][3]
