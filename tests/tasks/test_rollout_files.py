"""Reading rollouts files as their writers really write them (issue 18, the data path).

JSON Lines ends a line at ``\\n`` only (https://jsonlines.org); a ``\\r`` between tokens
is JSON whitespace, and U+2028 / U+0085 inside a string are legal JSON characters that
Python's ``json.dumps(..., ensure_ascii=False)`` writes raw. Before this, text-mode
reading split a line at a bare ``\\r``, a truncated ``.gz`` raised ``EOFError`` (click
printed "Aborted!" and nothing was scored) and bytes that are not UTF-8 were replaced
silently.
"""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

from execgym import LineProblem, RolloutLine, load_rollouts, load_tasks
from execgym.cli import main
from execgym.errors import DamagedInput
from execgym.tasks.datasets._files import read_records
from execgym.tasks.loaders import read_jsonl


def rollout(task_id: str, completion: str) -> str:
    return json.dumps({"task_id": task_id, "completion": completion}, ensure_ascii=False)


def test_a_bare_carriage_return_between_tokens_does_not_split_the_line(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    # Valid JSON: "\r" is whitespace between tokens (RFC 8259 section 2).
    first = '{"task_id": "t/1",\r"completion": "    return 1\\n"}'
    assert json.loads(first)["task_id"] == "t/1"
    path.write_bytes((first + "\n" + rollout("t/2", "x") + "\r\n").encode())
    items = list(load_rollouts(path))
    assert [type(i) for i in items] == [RolloutLine, RolloutLine]
    assert [i.index for i in items] == [0, 1]
    assert items[0].rollout.completion == "    return 1\n"
    assert items[1].rollout.task_id == "t/2"  # CRLF line ends still work


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\u0085"])
def test_unicode_line_separators_inside_strings_stay_in_the_string(
    tmp_path: Path, separator: str
) -> None:
    # json.dumps(ensure_ascii=False) writes these raw (it escapes only U+0000-U+001F).
    completion = f"    return 'a{separator}b'\n"
    lines = [rollout("t/1", completion), rollout("t/2", "y")]
    assert separator in lines[0]
    text = ("\n".join(lines) + "\n").encode()
    for name, data in {"r.jsonl": text, "r.jsonl.gz": gzip.compress(text)}.items():
        path = tmp_path / name
        path.write_bytes(data)
        items = list(load_rollouts(path))
        assert [type(i) for i in items] == [RolloutLine, RolloutLine], name
        assert items[0].rollout.completion == completion
        assert items[1].index == 1
        # The data-set loaders read records the same way (str.splitlines() split here).
        records = list(read_records(path))
        assert [r["completion"] for r in records] == [completion, "y"]


def test_every_line_of_a_truncated_gz_before_the_cut_is_read_then_the_damage_is_raised(
    tmp_path: Path,
) -> None:
    lines = [rollout(f"t/{i}", f"    return {i}\n") for i in range(400)]
    whole = gzip.compress(("\n".join(lines) + "\n").encode())
    path = tmp_path / "r.jsonl.gz"
    path.write_bytes(whole[: len(whole) * 2 // 3])
    items: list[RolloutLine | LineProblem] = []
    with pytest.raises(DamagedInput, match="truncated") as caught:
        items.extend(load_rollouts(path))
    # What gunzip itself recovers from the same bytes (zlib, streaming): every complete
    # line of it, in order, with its index; a cut-off last line is a bad line.
    recovered = _gunzip_prefix(path.read_bytes())
    complete = recovered.split(b"\n")[:-1]
    read = [i for i in items if isinstance(i, RolloutLine)]
    assert len(complete) > 100
    assert [i.rollout.task_id for i in read[: len(complete)]] == [
        f"t/{n}" for n in range(len(complete))
    ]
    assert [i.index for i in items] == list(range(len(items)))
    assert len(items) in (len(complete), len(complete) + 1)
    assert caught.value.lines_read == len(items)
    assert str(path) in str(caught.value)


def test_a_truncated_tasks_gz_is_an_error_not_a_partial_task_set(tmp_path: Path) -> None:
    record = {"task_id": "t/1", "prompt": "def f():\n", "tests": "", "entry_point": "f"}
    data = gzip.compress(("\n".join(json.dumps(record) for _ in range(50)) + "\n").encode())
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(data[:-12])  # the trailer (CRC, size) and a little data gone
    with pytest.raises(DamagedInput, match="truncated"):
        load_tasks(path)


def test_a_corrupt_gz_names_the_file_and_keeps_what_came_before(tmp_path: Path) -> None:
    data = bytearray(gzip.compress(("\n".join(rollout("t/1", "x") for _ in range(2000))).encode()))
    data[len(data) // 2 :] = b"\x00" * (len(data) - len(data) // 2)
    path = tmp_path / "r.jsonl.gz"
    path.write_bytes(bytes(data))
    items: list[RolloutLine | LineProblem] = []
    with pytest.raises(DamagedInput, match=r"corrupt|truncated") as caught:
        items.extend(load_rollouts(path))
    assert str(path) in str(caught.value)
    assert caught.value.lines_read == len(items)


def test_concatenated_gz_members_are_all_read(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl.gz"
    path.write_bytes(
        gzip.compress((rollout("t/1", "a") + "\n").encode())
        + gzip.compress((rollout("t/2", "b") + "\n").encode())
    )
    assert [i.rollout.task_id for i in load_rollouts(path)] == ["t/1", "t/2"]  # type: ignore[union-attr]


def test_bytes_that_are_not_utf8_are_replaced_with_a_warning_naming_the_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "r.jsonl"
    bad = b'{"task_id": "t/2", "completion": "    return 1  # \xff\xfe caf\xe9\\n"}'
    path.write_bytes(
        b"\xef\xbb\xbf" + rollout("t/1", "x").encode() + b"\n\n" + bad + b"\n" + b'{"task_id": 3}\n'
    )
    told: list[LineProblem] = []
    items = list(load_rollouts(path, warn=told.append))
    assert isinstance(items[1], RolloutLine)
    assert items[1].rollout.completion == "    return 1  # \ufffd\ufffd caf\ufffd\n"
    assert [(w.line_number, w.index) for w in told] == [(3, 1)]
    first_bad = bad.index(b"\xff") + 1
    assert f"first at byte {first_bad} of the line" in told[0].message
    assert isinstance(items[2], LineProblem)  # other lines are unaffected
    # By default the warning is logged (execgym's CLI shows warnings on stderr).
    with caplog.at_level(logging.WARNING, logger="execgym.tasks.loaders"):
        list(read_jsonl(path))
    assert f"{path}:3: bytes that are not UTF-8" in caplog.text


def _gunzip_prefix(data: bytes) -> bytes:
    import zlib

    inflate = zlib.decompressobj(wbits=31)
    return inflate.decompress(data)


@pytest.fixture
def one_task(tmp_path: Path) -> Path:
    path = tmp_path / "tasks.jsonl"
    record = {
        "task_id": "t/1",
        "prompt": "def f(x):\n",
        "entry_point": "f",
        "tests": "def check(c):\n    assert c(2) == 4\n",
    }
    path.write_text(json.dumps(record) + "\n")
    return path


def test_cli_scores_every_complete_line_of_a_truncated_gz_then_exits_3(
    bwrap_sandbox: object, one_task: Path, tmp_path: Path
) -> None:
    lines = [
        rollout("t/1", f"    return x * 2  # {i}\n" if i % 2 else f"    return x  # {i}\n")
        for i in range(6)
    ]
    # Stored blocks of known size, so the cut falls after line 4's newline for sure.
    whole = gzip.compress(("\n".join(lines) + "\n").encode(), compresslevel=0)
    cut = whole.index(b"\n", whole.index(lines[3].encode())) + 1
    rollouts = tmp_path / "rollouts.jsonl.gz"
    rollouts.write_bytes(whole[:cut])
    out = tmp_path / "results.jsonl"
    result = CliRunner().invoke(
        main, ["score", str(one_task), str(rollouts), "-o", str(out), "--timeout", "5"]
    )
    assert result.exit_code == 3, (result.stdout, result.stderr)
    assert "Aborted" not in result.stderr
    assert "truncated" in result.stderr
    assert str(rollouts) in result.stderr
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["index"] for r in results) == [0, 1, 2, 3]
    assert [r["verdict"] for r in sorted(results, key=lambda r: r["index"])] == [
        "failed",
        "passed",
        "failed",
        "passed",
    ]
    assert "pass@1" in result.stdout


def test_cli_warns_about_bytes_that_are_not_utf8_and_scores_the_line(
    bwrap_sandbox: object, one_task: Path, tmp_path: Path
) -> None:
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_bytes(b'{"task_id": "t/1", "completion": "    return x * 2  # \xe9\\n"}\n')
    out = tmp_path / "results.jsonl"
    result = CliRunner().invoke(main, ["score", str(one_task), str(rollouts), "-o", str(out)])
    assert result.exit_code == 0, result.stderr
    assert f"{rollouts}:1: bytes that are not UTF-8" in result.stderr
    assert json.loads(out.read_text())["verdict"] == "passed"


def test_results_lines_survive_readers_that_split_at_unicode_line_breaks(
    bwrap_sandbox: object, one_task: Path, tmp_path: Path
) -> None:
    rollouts = tmp_path / "rollouts.jsonl"
    records = [
        {"task_id": "t/1", "completion": "    return x * 2\n", "rollout_id": f"r{i}{sep}x"}
        for i, sep in enumerate(["\u2028", "\u2029", "\u0085"])
    ]
    rollouts.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8"
    )
    out = tmp_path / "results.jsonl"
    result = CliRunner().invoke(main, ["score", str(one_task), str(rollouts), "-o", str(out)])
    assert result.exit_code == 0, result.stderr
    text = out.read_text(encoding="utf-8")
    results = [json.loads(line) for line in text.splitlines()]  # what some readers do
    assert sorted(r["rollout_id"] for r in results) == sorted(r["rollout_id"] for r in records)
    assert len(text.splitlines()) == len(text.split("\n")) - 1 == len(records)


def test_validated_tasks_are_written_one_per_line_for_splitlines_readers(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from execgym import Task
    from execgym.validation.report import write_clean

    tasks = [
        Task(
            task_id=f"t/{i}",
            prompt=f"def f():\n    '''a{sep}b'''\n",
            tests="def check(c):\n    pass\n",
            entry_point="f",
        )
        for i, sep in enumerate(["\u2028", "\u2029", "\u0085"])
    ]
    report = SimpleNamespace(kept_ids=lambda: [t.task_id for t in tasks])
    path = tmp_path / "clean.jsonl"
    assert write_clean(report, tasks, path) == 3  # type: ignore[arg-type]
    assert len(path.read_text(encoding="utf-8").splitlines()) == 3
    loaded, problems = load_tasks(path)
    assert problems == []
    assert [t.prompt for t in loaded.values()] == [t.prompt for t in tasks]


class _CountedChunk(bytes):
    """A chunk that counts the bytes the line splitter copies or scans through it."""

    handled = 0

    def __radd__(self, other: bytes) -> bytes:  # `partial_line + chunk`
        _CountedChunk.handled += len(other) + len(self)
        return bytes(other) + bytes(self)

    def split(self, *args, **kwargs):  # type: ignore[override]
        _CountedChunk.handled += len(self)
        return bytes(self).split(*args, **kwargs)


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_a_line_longer_than_many_chunks_is_read_in_linear_work(
    tmp_path: Path, monkeypatch, suffix: str
) -> None:
    # Found by QA (2026-12-02): the partial line was joined to every new chunk and split
    # again, so a line of n chunks cost n^2 / 2 chunk copies: one rollout with a 70 MiB
    # file took 198 s of the host's CPU before it was refused (and once more to count
    # the lines). Counted, not timed: each byte is handled a bounded number of times.
    from execgym.tasks import loaders

    chunks = loaders._chunks
    monkeypatch.setattr(loaders, "_chunks", lambda *a: (_CountedChunk(c) for c in chunks(*a)))
    monkeypatch.setattr(loaders, "CHUNK_BYTES", 1024)
    long_line = json.dumps({"task_id": "t/1", "completion": "x" * 2_000_000})
    text = "\n".join(['{"task_id": "t/1", "completion": "a"}', long_line, long_line, ""])
    path = tmp_path / f"r{suffix}"
    data = text.encode()
    path.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else data)
    _CountedChunk.handled = 0
    items = list(load_rollouts(path))
    assert [len(item.rollout.completion) for item in items] == [1, 2_000_000, 2_000_000]
    assert _CountedChunk.handled <= 2 * len(data)


def test_an_integer_too_long_to_read_is_a_bad_line_not_a_crash(tmp_path: Path) -> None:
    # Found by QA (2026-12-02): json.loads raises a plain ValueError (not a
    # JSONDecodeError) for an integer over Python's 4300-digit limit, and the loader read
    # its `.msg`: AttributeError, and `execgym score` died with a traceback, scoring nothing.
    huge = "1" * 5000
    path = tmp_path / "r.jsonl"
    path.write_text(
        '{"task_id": "t/1", "completion": "a"}\n'
        f'{{"task_id": "t/1", "completion": "b", "seed": {huge}}}\n'
        '{"task_id": "t/1", "completion": "c"}\n'
    )
    items = list(load_rollouts(path))
    assert [type(item).__name__ for item in items] == ["RolloutLine", "LineProblem", "RolloutLine"]
    assert "4300" in items[1].message
    assert "write it as a string" in items[1].message
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        '{"task_id": "t/1", "prompt": "def f():\\n", "entry_point": "f", '
        '"tests": "def check(c):\\n    assert c() == 1\\n"}\n'
        f'{{"task_id": "t/2", "kind": "function_call", "fn_name": "f", "prompt": "", '
        f'"test_cases": [{{"args": [], "expected": {huge}}}]}}\n'
    )
    loaded, problems = load_tasks(tasks)
    assert list(loaded) == ["t/1"]
    assert [p.line_number for p in problems] == [2]
    assert "4300" in problems[0].message


async def test_a_bad_rollout_line_keeps_its_readable_task_id_in_its_result(tmp_path: Path) -> None:
    # Found by QA (2026-12-02): `{"task_id": "t/1", "completion": 5}` was scored invalid
    # with task_id "", so per-task counts and joins on task_id lost it.
    from execgym import Scorer, Task
    from execgym.testing import FakeSandbox, fake_result

    path = tmp_path / "r.jsonl"
    path.write_text('{"task_id": "t/1", "completion": 5}\n{"completion": "x"}\n[1]\n')
    task = Task(task_id="t/1", prompt="", tests="def check(c):\n    assert c()\n", entry_point="f")
    scorer = Scorer({"t/1": task}, FakeSandbox([fake_result()]))
    results = await scorer.score(load_rollouts(path))
    assert [(r.task_id, r.verdict.value) for r in results] == [
        ("t/1", "invalid"),
        ("", "invalid"),
        ("", "invalid"),
    ]
