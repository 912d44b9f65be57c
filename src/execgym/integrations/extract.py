"""The code of a completion: its last fenced block, or all of it."""

from __future__ import annotations

import re
from typing import Any

_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[^\n]*\n(.*?)^[ \t]*\1[ \t]*$", re.MULTILINE | re.DOTALL)


def completion_text(completion: Any) -> str:
    """The text of a completion: a plain string, or a conversation's last assistant turn.

    TRL passes conversational completions as ``[{"role": "assistant", "content": ...}]``.

    Raises:
        TypeError: for anything else.
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        turns = [m for m in completion if isinstance(m, dict) and m.get("role") == "assistant"]
        if turns:
            content = turns[-1].get("content", "")
            if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
                return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            return str(content)
    raise TypeError(
        "a completion must be a string or a list of chat messages with an assistant turn, "
        f"not {type(completion).__name__}"
    )


def extract_code(text: str) -> str:
    """The last fenced code block of ``text`` (```` ``` ```` or ``~~~``), else ``text``."""
    blocks = _FENCE.findall(text)
    return blocks[-1][1] if blocks else text
