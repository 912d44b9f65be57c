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


SOLUTION = "def add(a, b):\n    return a + b\n"


@pytest.mark.parametrize(
    ("completion", "code"),
    [
        # OpenRLHF decodes with special tokens kept: the closing fence is followed by them.
        (f"Sure:\n```python\n{SOLUTION}```<|im_end|>", SOLUTION),
        (f"```python\n{SOLUTION}```<|im_end|>\n<|endoftext|>", SOLUTION),
        (f"```python\n{SOLUTION}```</s>", SOLUTION),
        # unclosed (cut off by the token limit), then the end-of-turn token
        (f"```python\n{SOLUTION}<|im_end|>", SOLUTION.rstrip("\n")),
        # the closing fence glued to the last code line, with or without tokens after it
        (f"```python\n{SOLUTION.rstrip()}```", SOLUTION),
        (f"```python\n{SOLUTION.rstrip()}```<|im_end|>", SOLUTION),
        # prose right after the closing fence
        (f"```python\n{SOLUTION}``` Hope this helps!\n", SOLUTION),
        # a solution block followed by a usage-example block
        (f"```python\n{SOLUTION}```\nExample usage:\n```python\nprint(add(1, 2))\n```\n", SOLUTION),
        (f"```\n{SOLUTION}```\nUsage:\n```\nassert add(2, 2) == 4\n```", SOLUTION),
        # no fence at all, special token after the code
        (f"{SOLUTION}<|im_end|>", SOLUTION.rstrip("\n")),
    ],
)
def test_code_from_real_chat_completions(completion: str, code: str) -> None:
    assert extract_code(completion, "python") == code
    assert extract_code(completion) == code


def test_a_later_complete_program_is_not_mistaken_for_a_usage_example() -> None:
    # a final script that defines nothing but does not call the earlier block: it wins
    first = "```python\ndef helper(x):\n    return x\n```\n"
    final = "```python\nn = int(input())\nprint(n * 2)\n```\n"
    assert extract_code(first + final, "python") == "n = int(input())\nprint(n * 2)\n"
    # in another language the last block is chosen, as before
    cpp = "```cpp\nint add(int a, int b) { return a + b; }\n```\n```cpp\nadd(1, 2);\n```"
    assert extract_code(cpp, "cpp") == "add(1, 2);\n"


def test_a_language_tag_inside_a_block_is_content_not_a_closing_fence() -> None:
    assert extract_code("```\n```python\nx = 1\n```\n") == "```python\nx = 1\n"


def test_one_extraction_policy_for_every_entry_point() -> None:
    import execgym
    from execgym import integrations
    from execgym.integrations import extract as adapters_extract
    from execgym.tasks import extract as policy

    assert execgym.extract_code is policy.extract_code
    assert integrations.extract_code is policy.extract_code
    assert adapters_extract.extract_code is policy.extract_code
