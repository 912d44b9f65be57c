r"""The results JSONL that ``execgym score`` writes: one line per rollout, as they finish.

Each line is written and flushed to the operating system as soon as it is known (its
rollout finished and, in input order, every earlier one too), so a crash or a signal
loses nothing already scored; nothing is kept in memory after it is written.

A line is exactly one JSON object followed by ``\n``, with no other line break in it,
for every reader: ``json.dumps`` escapes the control characters, and this module also
escapes U+0085 (NEL), U+2028 and U+2029, which JSON allows raw inside strings but which
``str.splitlines()`` (and JavaScript's older parsers) take as line ends. A lone
surrogate in a string (a program's undecodable output, say) is written as its JSON
escape (``\udc80``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from execgym.scoring import ScoredRollout

_LINE_BREAKS = {"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}
r"""Characters other than ``\n`` and ``\r`` that ``str.splitlines()`` splits on and
``json.dumps(ensure_ascii=False)`` leaves raw (it escapes everything below U+0020)."""


def result_line(result: ScoredRollout) -> bytes:
    """``result`` as one line of the results JSONL (UTF-8, ending in a newline)."""
    return json_line(result.to_json())


def json_line(value: object) -> bytes:
    r"""``value`` as one JSON line that every line splitter reads as one line.

    Non-ASCII text stays readable (``ensure_ascii=False``) except the characters in
    ``_LINE_BREAKS``, which become ``\uXXXX`` escapes (the same string to a JSON
    parser); lone surrogates become ``\udXXX`` escapes too.
    """
    text = json.dumps(value, ensure_ascii=False)
    for char, escape in _LINE_BREAKS.items():
        if char in text:
            text = text.replace(char, escape)
    return (text + "\n").encode("utf-8", "backslashreplace")


class ResultsFile:
    """The results file: write each result as a line, flushed; cut a partial line on failure.

    Args:
        path: The file, created or truncated; ``"-"``: standard output (left open).

    Attributes:
        written: Lines written completely.
        size: Bytes of those lines (the file is cut back to this after a failed write).

    Raises:
        OSError: from opening, and from :meth:`write` (a full disk, say).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        if self.path == "-":
            sys.stdout.flush()
            self._file: BinaryIO = open(sys.stdout.fileno(), "wb", closefd=False)  # noqa: SIM115
        else:
            self._file = open(self.path, "wb")  # noqa: SIM115 - closed by close()
        self.written = 0
        self.size = 0
        self._failed = False

    def write(self, result: ScoredRollout) -> None:
        """Write ``result``'s line and flush it to the operating system.

        Raises:
            OSError: if the write fails; the file is then cut back to its complete
                lines by :meth:`close`.
        """
        data = result_line(result)
        try:
            self._file.write(data)
            self._file.flush()
        except OSError:
            self._failed = True
            raise
        self.written += 1
        self.size += len(data)

    def close(self) -> None:
        """Close the file; after a failed write, drop what was written of the last line."""
        with contextlib.suppress(OSError):  # a failed write's data stays in the buffer
            self._file.close()
        if self._failed and self.path != "-":
            with contextlib.suppress(OSError):
                if os.path.isfile(self.path) and os.stat(self.path).st_size > self.size:
                    os.truncate(self.path, self.size)
