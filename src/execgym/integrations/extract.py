"""The text of a completion (a string or a chat conversation), and its code.

:func:`extract_code` is :func:`execgym.tasks.extract.extract_code`, the one
code-extraction policy of execgym (documented there), re-exported for the adapters.
"""

from __future__ import annotations

from typing import Any

from execgym.tasks.extract import extract_code

__all__ = ["completion_text", "extract_code"]


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
