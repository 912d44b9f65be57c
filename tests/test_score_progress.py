"""The ``score`` progress bar and the log records written while it shows.

A record written straight to stderr lands after the bar's text on the same line (the
bar has no newline until it closes), so the terminal shows ``  33%|███  | 1/3 [...]
WARNING ...`` and the bar is drawn again below. tqdm's ``logging_redirect_tqdm`` sends
records through ``tqdm.write``, which clears the bar, writes the record on a line of
its own and redraws the bar.
"""

from __future__ import annotations

import asyncio
import io
import logging
from pathlib import Path

import pytest

from execgym.cli.score_batch import Outcome, Results, _progress
from execgym.ops import logs
from execgym.scoring.results import invalid_result


class Terminal(io.StringIO):
    """stderr as a terminal (tqdm draws its bar only on one)."""

    def isatty(self) -> bool:
        return True


def test_log_records_do_not_break_the_progress_bar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    root = logging.getLogger()
    before = list(root.handlers), root.level
    logs.configure("warning")  # execgym's handler: it writes to the current sys.stderr
    log = logging.getLogger("execgym.test")

    results = Results(str(tmp_path / "results.jsonl"), Outcome(), lambda: None)
    results.open()

    async def run() -> None:
        with _progress(results, 3):
            for index in range(3):
                log.warning("sandbox_error task_id=t/%d attempt=1: slow host", index)
                results.write(invalid_result(index, f"t/{index}", f"r{index}", "bad", "none"))

    try:
        asyncio.run(run())
    finally:
        results.close()
        root.handlers[:], _ = before
        root.setLevel(before[1])
    shown = terminal.getvalue()
    assert "3/3" in shown, shown  # the bar was drawn
    records = [line for line in shown.split("\n") if "slow host" in line]
    assert len(records) == 3, shown
    for line in records:
        # what the terminal shows of that line: the text after its last carriage return
        visible = line.split("\r")[-1]
        assert visible.startswith("execgym: WARNING: sandbox_error"), repr(line)
        assert "rollout/s" not in visible, repr(line)
