"""Code extraction from chat completions."""

from __future__ import annotations

import pytest

from execgym.tasks.extract import extract_code, fenced_blocks, is_fenced


@pytest.mark.parametrize(
    ("completion", "language", "code"),
    [
        ("def f():\n    return 1\n", "python", "def f():\n    return 1\n"),  # not fenced
        ("Here:\n```python\nx = 1\n```\nDone.", "python", "x = 1\n"),
        ("```py\na = 1\n```\nbetter:\n```python\na = 2\n```\n", "python", "a = 2\n"),  # last
        ("```python\nans = 1\n```\n```text\n1\n```\n", "python", "ans = 1\n"),  # tag wins
        ("```cpp\nint a;\n```\n```bash\ng++ a.cpp\n```\n", "c++", "int a;\n"),
        ("```\nplain\n```\n```text\nout\n```\n", "python", "plain\n"),  # untagged next
        ("```text\nonly\n```", "python", "only\n"),  # any block last
        ("~~~javascript\nlet x;\n~~~\n", "js", "let x;\n"),
        ("````python\n```inner```\nx\n````\n", "python", "```inner```\nx\n"),  # longer fence
        ("```python\ncut off by the token limit", "python", "cut off by the token limit"),
        ('```python title="a.py"\nq = 1\n```', "python", "q = 1\n"),
        ("```python\r\nw = 1\r\n```\r\n", "python", "w = 1\r\n"),
        ("   ```rust\nfn main() {}\n   ```", "rust", "fn main() {}\n"),
        ("```python\n```", "python", ""),
        ("text ``` not a fence\n", "python", "text ``` not a fence\n"),
    ],
)
def test_extract_code(completion: str, language: str, code: str) -> None:
    assert extract_code(completion, language) == code


def test_without_a_language_the_last_untagged_then_last_block() -> None:
    assert extract_code("```c\na\n```\n```go\nb\n```") == "b\n"
    assert extract_code("```\na\n```\n```go\nb\n```") == "a\n"


def test_blocks_and_tags() -> None:
    blocks = fenced_blocks("```Python3\nx\n```\n~~~\ny\n~~~")
    assert [(b.tag, b.code) for b in blocks] == [("python3", "x\n"), ("", "y\n")]
    assert is_fenced("```\n```")
    assert not is_fenced("no code")
