"""The trainers' adapters, called exactly as verl, TRL and OpenRLHF call them.

None of the frameworks is light enough to import here (torch, ray, vllm), so each test
reproduces its call: verl's keyword call of ``compute_score`` with a JSON ground truth,
TRL's ``reward_func(prompts=..., completions=..., completion_ids=..., **columns)``, and
OpenRLHF's POST body and ``reward_func(queries, prompts, labels)``.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from execgym.integrations import RewardClient, completion_text, extract_code
from execgym.integrations.ground_truth import record_from_ground_truth, task_from_record
from execgym.integrations.openrlhf import create_app, reward_func
from execgym.integrations.trl import make_async_reward, make_reward
from execgym.integrations.verl import compute_score, compute_score_async

ADD_CASES = json.dumps({"assert_case": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]})
GOOD = "Here it is:\n```python\ndef add(a, b):\n    return a + b\n```\n"
WRONG = "```python\ndef add(a, b):\n    return a - b\n```"
ALWAYS_EQUAL = (
    "```python\nclass _Any:\n    def __eq__(self, other): return True\n"
    "def add(a, b):\n    return _Any()\n```"
)
STDIO = json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})


def test_code_comes_from_the_last_fenced_block() -> None:
    text = "```python\nx = 1\n```\nthen\n~~~\ndef f():\n    return 2\n~~~\n"
    assert extract_code(text) == "def f():\n    return 2\n"
    assert extract_code("def f(): pass") == "def f(): pass"
    turn = [{"role": "assistant", "content": "hi"}]
    assert completion_text(turn) == "hi"
    with pytest.raises(TypeError, match="assistant turn"):
        completion_text(42)


def test_ground_truth_formats_become_task_records() -> None:
    record = record_from_ground_truth(ADD_CASES, "def add(a, b): ...", task_id="t")
    assert record["entry_point"] == "add"
    assert task_from_record(record).tests.startswith("def check(candidate):\n    assert add(1, 2)")
    calls = record_from_ground_truth(
        {"inputs": ["[1, 2]\n3"], "outputs": ["[1, 2, 3]"], "fn_name": "push"}, ""
    )
    assert calls["kind"] == "function_call"
    assert calls["test_cases"] == [{"args": [[1, 2], 3], "expected": [1, 2, 3]}]
    stdio = record_from_ground_truth(STDIO, "")
    assert stdio["test_cases"] == [{"input": "1 2\n", "output": "3\n"}]
    open_r1 = record_from_ground_truth(
        {
            "verification_info": {
                "language": "python",
                "test_cases": [{"input": "1\n", "output": "2\n", "type": "stdin_stdout"}],
            }
        },
        "",
    )
    assert (open_r1["kind"], open_r1["language"]) == ("stdio", "python")


def test_verl_keyword_call_scores_and_logs(bwrap_sandbox) -> None:
    common = {"data_source": "mbpp", "ground_truth": ADD_CASES, "extra_info": {"index": 3}}
    good = compute_score(solution_str=GOOD, **common)
    assert (good["score"], good["acc"], good["verdict"]) == (1.0, 1.0, "passed")
    assert compute_score(solution_str=WRONG, **common)["score"] == 0.0
    hacked = compute_score(solution_str=ALWAYS_EQUAL, **common)
    assert (hacked["score"], hacked["tampered"]) == (0.0, 1.0)
    quality = compute_score(solution_str=GOOD, reward="quality", **common)
    assert 0.0 < quality["score"] <= 1.0
    assert "reward/static" in quality


def test_verl_async_and_unusable_ground_truth(bwrap_sandbox) -> None:
    async def main() -> list[dict[str, object]]:
        return list(
            await asyncio.gather(
                compute_score_async("mbpp", GOOD, {"assert_case": ["assert add(2, 2) == 4"]}),
                compute_score_async("mbpp", GOOD, "not json"),
            )
        )

    good, bad = asyncio.run(main())
    assert good["score"] == 1.0
    assert (bad["score"], bad["masked"], bad["verdict"]) == (0.0, 1.0, "invalid")


def test_trl_reward_function_as_grpo_calls_it(bwrap_sandbox) -> None:
    reward = make_reward("binary")
    assert reward.__name__ == "execgym_binary"
    prompts = [[{"role": "user", "content": "write add"}]] * 4
    completions = [
        [{"role": "assistant", "content": GOOD}],
        [{"role": "assistant", "content": WRONG}],
        GOOD,
        [{"role": "assistant", "content": "def f(): return 1"}],
    ]
    columns = {
        "ground_truth": [ADD_CASES, ADD_CASES, None, None],
        "tests": [None, None, "def check(candidate):\n    assert candidate(1, 1) == 2\n", None],
        "entry_point": [None, None, "add", None],
        "trainer_state": None,
    }
    rewards = reward(
        prompts=prompts, completions=completions, completion_ids=[[1], [2], [3], [4]], **columns
    )
    assert rewards == [1.0, 0.0, 1.0, None]  # the last has no tests: masked, never 0.0


def test_trl_async_reward_function(bwrap_sandbox) -> None:
    reward = make_async_reward("fraction")
    half = "```python\ndef add(a, b):\n    return a + b if a > 0 else 99\n```"
    rewards = asyncio.run(
        reward(prompts=["p", "p"], completions=[GOOD, half], ground_truth=[ADD_CASES] * 2)
    )
    assert rewards == [1.0, 0.5]


def test_stdio_ground_truth_is_refused_until_the_stdio_judge_is_installed(bwrap_sandbox) -> None:
    rewards = make_reward()(prompts=["p"], completions=["print(3)"], ground_truth=[STDIO])
    task_fields = task_from_record.__globals__["Task"].model_fields
    if "kind" in task_fields:  # the stdio judge is installed: it is judged
        assert rewards == [1.0]
    else:
        assert rewards == [None]


async def test_openrlhf_remote_reward_server(bwrap_sandbox) -> None:
    async with RewardClient(sandbox=bwrap_sandbox) as client:
        app = create_app(client)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://rm") as http:
            body = {
                "query": ["Q: add" + GOOD, "Q: add" + WRONG],
                "prompts": ["Q: add", "Q: add"],
                "labels": [ADD_CASES, ADD_CASES],
            }
            answer = await http.post("/get_reward", json=body)
            assert answer.status_code == 200
            data = answer.json()
            assert data["rewards"] == [1.0, 0.0]
            assert data["scores"] == [1.0, 0.0]
            assert data["extra_logs"]["pass_rate"] == 0.5
            bad = await http.post("/get_reward", json={"query": ["a"], "labels": [1, 2]})
            assert bad.status_code == 422


def test_openrlhf_reward_func_file_mode(bwrap_sandbox) -> None:
    result = reward_func(["P" + GOOD, "P" + WRONG], ["P", "P"], [ADD_CASES, ADD_CASES])
    assert result["rewards"] == [1.0, 0.0]
    assert result["extra_logs"]["masked"] == 0.0
