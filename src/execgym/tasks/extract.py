"""Code out of a chat completion: the one code-extraction policy of execgym.

Every entry point goes through :func:`extract_code`: the ``score`` command, the HTTP
service, and the trainers' adapters (verl, OpenRLHF, TRL, via
:class:`~execgym.integrations.RewardClient`); :func:`execgym.integrations.extract_code`
is this same function. The policy, for real chat completions:

- Trailing special tokens are not code: a completion decoded with special tokens kept
  (OpenRLHF does) ends in ``<|im_end|>``, ``<|endoftext|>``, ``</s>``, ``<eos>``,
  ``<end_of_turn>``...; they are dropped from the end of the completion first.
- A completion without a fence is code already and comes back unchanged.
- Fences are CommonMark's, relaxed where models break them: an opening line of three or
  more backticks or tildes (indented at most three spaces) with an optional info string
  whose first word is the language tag; the block closes at a line that starts with the
  same character at least as many times, **whatever follows it** unless that is a bare
  word (```` ```<|im_end|> ```` and ```` ``` Hope this helps ```` close the block;
  ```` ```python ```` inside a block is content, as in CommonMark), or at a closing run
  of backticks glued to the end of a code line (``return a + b```  ``: the code before
  it is kept). A block left open (a reply cut off by the token limit) runs to the end of
  the completion.
- The block chosen is the **last** one tagged with the task's language (aliases such as
  ``py``, ``c++``, ``js`` count); failing that, the last untagged block; failing that,
  the last block of any tag. Models often show an attempt first and the answer last,
  and a tag for another language (a ``text`` sample output, a ``bash`` command line) is
  less likely to be the answer than a block with no tag.
- Python only: when that last block is a usage example of an earlier one (it defines no
  top-level function or class and calls a name an earlier block defines), the last
  block that defines something is chosen instead: "here is the solution... example
  usage: ``print(add(1, 2))``" scores the solution, not the example.

SandboxFusion (bytedance/SandboxFusion, ``sandbox/utils/extraction.py`` at commit
469de0845cb7d665bc68044d541aa3aa28c5b30a, ``extract_code_from_freeform_completion``)
also accepts a closing fence followed by anything and an unclosed block, but joins
**every** complete block (then cuts the text at ``# Example usage``); it needs a newline
before a closing fence, so a fence glued to code is not closed there. execgym runs one
block: joining an earlier wrong attempt to the final answer would run both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from execgym.tasks.models import normalize_language

_OPEN = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")
_SPECIAL = r"<\|[^|\n<>]{1,40}\|>|</s>|<s>|<eos>|<eot>|<end_of_turn>|<\|?endoftext\|?>"
_TRAILING_SPECIAL = re.compile(rf"(?:\s*(?:{_SPECIAL}))+\s*\Z")
_ONLY_SPECIAL = re.compile(rf"^(?:\s*(?:{_SPECIAL}))*\s*$")
_TAG_WORD = re.compile(r"^[\w+#.{}-]+$")
_DEFINES = re.compile(r"^(?:async[ \t]+def|def|class)[ \t]+(\w+)", re.MULTILINE)
_PYTHON = {"python"}


@dataclass(frozen=True, slots=True)
class CodeBlock:
    """One fenced block: its language tag (``""`` if none) and its code."""

    tag: str
    code: str


def strip_special_tokens(text: str) -> str:
    """``text`` without the special tokens (``<|im_end|>``, ``</s>``...) at its end."""
    return _TRAILING_SPECIAL.sub("", text)


def _closing(line: str, fence: str) -> str | None:
    """The code kept before a closing fence on ``line``; ``None`` if it does not close.

    ``""`` for a fence line of its own (whatever follows: special tokens, prose).
    """
    stripped = line.lstrip(" ")
    char, length = fence[0], len(fence)
    if len(line) - len(stripped) <= 3 and stripped.startswith(char * length):
        rest = stripped.lstrip(char).strip()
        if not rest or not _TAG_WORD.match(rest):
            return ""
        return None
    if char != "`":
        return None
    glued = re.match(rf"^(?P<code>.*[^`\s].*?)(?<!`)`{{{length},}}(?P<rest>.*)$", line)
    if glued and _ONLY_SPECIAL.match(glued.group("rest")):
        return glued.group("code")
    return None


def fenced_blocks(text: str) -> list[CodeBlock]:
    """Every fenced code block in ``text``, in order (see the module docstring)."""
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
            raw = lines[index]
            line = raw.rstrip("\r\n")
            index += 1
            kept = _closing(line, fence)
            if kept is not None:
                if kept:
                    body.append(kept + raw[len(line) :] if raw != line else kept + "\n")
                break
            body.append(raw)
        tag = info.split()[0].lower() if info else ""
        blocks.append(CodeBlock(tag, "".join(body)))
    return blocks


def _language_of(tag: str) -> str | None:
    try:
        return normalize_language(tag.strip("{}.").removeprefix("language-"))
    except ValueError:
        return None


def _defined(code: str) -> set[str]:
    return set(_DEFINES.findall(code))


def _skip_usage_example(candidates: list[CodeBlock]) -> CodeBlock:
    last = candidates[-1]
    if _defined(last.code):
        return last
    earlier = [b for b in candidates[:-1] if _defined(b.code)]
    names = set().union(*(_defined(b.code) for b in earlier)) if earlier else set()
    used = set(re.findall(r"\b(\w+)\s*\(", last.code))
    return earlier[-1] if names & used else last


def extract_code(completion: str, language: str | None = None) -> str:
    """The code to run from a chat ``completion``, for a task in ``language``.

    Args:
        completion: The model's reply, fenced or not.
        language: The task's language (any accepted spelling), or ``None``.

    Returns:
        ``completion`` without trailing special tokens when it has no fenced block;
        otherwise the chosen block's code (see the module docstring).
    """
    text = strip_special_tokens(completion)
    blocks = fenced_blocks(text)
    if not blocks:
        return text
    wanted = normalize_language(language) if language else None
    tagged = [b for b in blocks if wanted and _language_of(b.tag) == wanted]
    untagged = [b for b in blocks if not b.tag]
    candidates = tagged or untagged or blocks
    python = wanted in _PYTHON or (
        wanted is None and all(not b.tag or _language_of(b.tag) in _PYTHON for b in candidates)
    )
    chosen = _skip_usage_example(candidates) if python else candidates[-1]
    return chosen.code


def is_fenced(completion: str) -> bool:
    """Whether ``completion`` holds at least one fenced code block."""
    return bool(fenced_blocks(completion))
