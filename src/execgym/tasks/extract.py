"""Code out of a chat completion: the one place markdown fences are read.

Chat models answer with prose around fenced blocks. :func:`extract_code` returns the
code the scorer runs:

- A completion without a fence is code already and comes back unchanged.
- Fences are CommonMark's: a line of three or more backticks or tildes (indented at
  most three spaces), an optional info string whose first word is the language tag, and
  a closing line of the same character at least as long. A block left open (a reply cut
  off by the token limit) runs to the end of the completion.
- The block chosen is the **last** one tagged with the task's language (aliases such as
  ``py``, ``c++``, ``js`` count); failing that, the last untagged block; failing that,
  the last block of any tag. Models often show an example first and the answer last,
  and a tag for another language (a ``text`` sample output, a ``bash`` command line) is
  less likely to be the answer than a block with no tag.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from execgym.tasks.models import normalize_language

_OPEN = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")


@dataclass(frozen=True, slots=True)
class CodeBlock:
    """One fenced block: its language tag (``""`` if none) and its code."""

    tag: str
    code: str


def fenced_blocks(text: str) -> list[CodeBlock]:
    """Every fenced code block in ``text``, in order."""
    blocks: list[CodeBlock] = []
    lines = text.splitlines(keepends=True)
    index = 0
    while index < len(lines):
        opening = _OPEN.match(lines[index].rstrip("\r\n"))
        index += 1
        if opening is None:
            continue
        fence = opening.group("fence")
        info = opening.group("info").strip()
        body: list[str] = []
        while index < len(lines):
            line = lines[index].rstrip("\r\n")
            index += 1
            stripped = line.lstrip(" ")
            closes = len(line) - len(stripped) <= 3 and stripped.rstrip()
            if closes and set(closes) == {fence[0]} and len(closes) >= len(fence):
                break
            body.append(lines[index - 1])
        tag = info.split()[0].lower() if info else ""
        blocks.append(CodeBlock(tag, "".join(body)))
    return blocks


def _language_of(tag: str) -> str | None:
    try:
        return normalize_language(tag.strip("{}.").removeprefix("language-"))
    except ValueError:
        return None


def extract_code(completion: str, language: str | None = None) -> str:
    """The code to run from a chat ``completion``, for a task in ``language``.

    Args:
        completion: The model's reply, fenced or not.
        language: The task's language (any accepted spelling), or ``None``.

    Returns:
        ``completion`` itself when it has no fenced block; otherwise the chosen block's
        code (see the module docstring).
    """
    blocks = fenced_blocks(completion)
    if not blocks:
        return completion
    wanted = normalize_language(language) if language else None
    tagged = [b for b in blocks if wanted and _language_of(b.tag) == wanted]
    untagged = [b for b in blocks if not b.tag]
    return (tagged or untagged or blocks)[-1].code


def is_fenced(completion: str) -> bool:
    """Whether ``completion`` holds at least one fenced code block."""
    return bool(fenced_blocks(completion))
