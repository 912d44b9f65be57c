"""The trainers' adapters, called exactly as verl, TRL and OpenRLHF call them.

Each test here reproduces the trainer's call (verl's keyword call of ``compute_score``,
TRL's ``reward_func(prompts=..., completions=..., completion_ids=..., **columns)``,
OpenRLHF's POST body and ``reward_func(queries, prompts, labels)``);
``test_trainers.py`` drives the same adapters through the trainers' own code from PyPI.
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
from execgym.integrations.verl import (
    compute_score,
    compute_score_async,
    compute_score_batch,
    score_keys,
)

ADD_CASES = json.dumps({"assert_case": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]})
GOOD = "Here it is:\n```python\ndef add(a, b):\n    return a + b\n```\n"
WRONG = "```python\ndef add(a, b):\n    return a - b\n```"
ALWAYS_EQUAL = (
    "```python\nclass _Any:\n    def __eq__(self, other): return True\n"
    "def add(a, b):\n    return _Any()\n```"
)
STDIO = json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})


def test_code_comes_from_the_last_fenced_block() -> None:  # the full policy: tests/tasks
    text = "```python\nx = 1\n```\nthen\n~~~\ndef f():\n    return 2\n~~~\n"
    assert extract_code(text) == "def f():\n    return 2\n"
    assert extract_code("def f(): pass") == "def f(): pass"
    turn = [{"role": "assistant", "content": "hi"}]
    assert completion_text(turn) == "hi"
    with pytest.raises(TypeError, match="assistant turn"):
        completion_text(42)


async def test_the_entry_point_comes_from_the_block_the_scorer_runs(bwrap_sandbox) -> None:
    # The solution in a python block, then an untagged sample run: the scorer runs the
    # python block, so the entry point is read from it (it was read from the sample,
    # which defines nothing, and became ``str``, the first name the assert calls).
    text = (
        "```python\ndef solve(n):\n    return n * n\n```\nFor example:\n"
        "```\nprint(solve(3))\n9\n```\n"
    )
    truth = {"assert_case": ["assert str(solve(3)) == '9'"]}
    async with RewardClient(sandbox=bwrap_sandbox) as client:
        score = await client.score(text, truth)
    assert (score.verdict, score.reward) == ("passed", 1.0)


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
    rewards = result["rewards"]  # torch tensors when torch is installed
    assert [float(r) for r in rewards] == [1.0, 0.0]
    assert float(result["extra_logs"]["masked"]) == 0.0


# ---- issue 16: key sets, ground-truth shapes, HF columns, file mode --------------------

TWO_SUM = "```python\ndef add(a, b):\n    return a + b\n```<|im_end|>"


@pytest.mark.parametrize("reward", ["binary", "fraction", "quality"])
def test_verl_same_keys_for_every_sample(bwrap_sandbox, reward: str) -> None:
    samples = [
        (GOOD, ADD_CASES),  # passed
        (WRONG, ADD_CASES),  # failed
        (ALWAYS_EQUAL, ADD_CASES),  # tampered
        (GOOD, "not json"),  # invalid: masked
        (GOOD, {"assert_case": ["x = 1"]}),  # no call: masked
        ("no code at all", ADD_CASES),  # error
    ]
    results = [
        compute_score("mbpp", solution, truth, {"index": i}, reward=reward)
        for i, (solution, truth) in enumerate(samples)
    ]
    keys = set(score_keys(reward))
    assert all(set(r) == keys for r in results), [sorted(set(r) ^ keys) for r in results]
    assert "reward/correctness" in keys
    passed, _, tampered, invalid, *_ = results
    assert passed["reward/correctness"] == 1.0
    assert (tampered["tampered"], tampered["score"]) == (1.0, 0.0)
    assert (invalid["masked"], invalid["score"]) == (1.0, 0.0)
    assert all(invalid[k] is None for k in keys if k.startswith("reward/"))  # not measured
    if reward == "quality":
        assert {"reward/efficiency", "reward/static"} <= keys


def test_verl_batch_compute_score(bwrap_sandbox) -> None:
    results = compute_score_batch(
        data_sources=["mbpp"] * 3,
        solution_strs=[GOOD, WRONG, GOOD],
        ground_truths=[ADD_CASES, ADD_CASES, "not json"],
        extra_infos=[{"index": 0}, {"index": 1}, {"index": 2}],
    )
    assert [r["score"] for r in results] == [1.0, 0.0, 0.0]
    assert [r["masked"] for r in results] == [0.0, 0.0, 1.0]
    assert len({frozenset(r) for r in results}) == 1
    with pytest.raises(ValueError, match="2 solution_strs, 1 ground_truths"):
        compute_score_batch(["a", "b"], [GOOD, GOOD], [ADD_CASES], None)


def test_apps_taco_raw_call_based_arguments_are_spread(bwrap_sandbox) -> None:
    record = record_from_ground_truth(
        {"fn_name": "add", "inputs": [[1, 2], [5, -1]], "outputs": [[3], [4]]}, ""
    )
    assert record["test_cases"] == [
        {"args": [1, 2], "expected": 3},
        {"args": [5, -1], "expected": 4},
    ]
    # TACO keeps the pair as a JSON string under "input_output"
    taco = {"input_output": json.dumps({"fn_name": "add", "inputs": [[1, 2]], "outputs": [3]})}
    leetcode = "```python\nclass Solution:\n    def add(self, a, b):\n        return a + b\n```"
    for truth in (taco, {"fn_name": "add", "inputs": [[1, 2]], "outputs": [[3]]}):
        assert compute_score("taco", TWO_SUM, truth)["score"] == 1.0
        assert compute_score("taco", leetcode, truth)["score"] == 1.0
        assert compute_score("taco", WRONG, truth)["score"] == 0.0


HUMANEVAL_ROW = {  # the columns of Hugging Face's openai_humaneval
    "task_id": "HumanEval/53",
    "prompt": 'from typing import List\n\n\ndef add(x: int, y: int):\n    """Add."""\n',
    "canonical_solution": "    return x + y\n",
    "test": "\n\nMETADATA = {}\n\n\ndef check(candidate):\n    assert candidate(2, 3) == 5\n",
    "entry_point": "add",
}
MBPP_ROW = {  # the columns of Hugging Face's mbpp (full)
    "task_id": 2,
    "text": "Write a function to add two numbers.",
    "code": "def add(a, b):\n    return a + b",
    "test_list": ["assert add(1, 2) == 3", "assert add(0, 0) == 0"],
    "test_setup_code": "",
    "challenge_test_list": [],
}


def test_trl_humaneval_and_mbpp_columns(bwrap_sandbox) -> None:
    reward = make_reward("binary")
    body = "```python\nfrom typing import List\ndef add(x: int, y: int):\n    return x + y\n```"
    columns = {k: [v, v] for k, v in HUMANEVAL_ROW.items() if k != "prompt"}
    assert reward(
        prompts=[HUMANEVAL_ROW["prompt"]] * 2,
        completions=[body, [{"role": "assistant", "content": WRONG}]],
        **columns,
    ) == [1.0, 0.0]
    # a conversational prompt whose user turn is the HumanEval prompt: its imports count
    chat = [[{"role": "user", "content": HUMANEVAL_ROW["prompt"]}]]
    only_body = "```python\ndef add(x: int, y: int) -> List[int]:\n    return x + y\n```"
    single = {k: [v] for k, v in HUMANEVAL_ROW.items() if k != "prompt"}
    assert reward(prompts=chat, completions=[only_body], **single) == [1.0]
    mbpp = {k: [v, v] for k, v in MBPP_ROW.items()}
    assert reward(prompts=[MBPP_ROW["text"]] * 2, completions=[GOOD, WRONG], **mbpp) == [1.0, 0.0]
    # the same rows as a verl ground truth
    assert compute_score("humaneval", body, HUMANEVAL_ROW)["score"] == 1.0
    assert compute_score("mbpp", GOOD, MBPP_ROW)["score"] == 1.0


def test_openrlhf_file_mode_loaded_as_openrlhf_loads_it(bwrap_sandbox) -> None:
    import importlib.util
    import sys

    import execgym.integrations.openrlhf as module

    # openrlhf/utils/agent.py (SingleTurnAgentExecutor.__init__), OpenRLHF commit
    # 3c3be6234e0cb353e76bb8019947db9dfe99fca7: the file is never put in sys.modules
    spec = importlib.util.spec_from_file_location("reward_func", module.__file__)
    assert spec is not None
    assert spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    assert "reward_func" not in sys.modules
    query = "<|im_start|>user\nadd<|im_end|>\n<|im_start|>assistant\n" + TWO_SUM
    result = loaded.reward_func([query], [query[: -len(TWO_SUM)]], [ADD_CASES])
    assert [float(r) for r in result["rewards"]] == [1.0]


def test_verl_episode_score_has_the_same_keys_for_every_episode() -> None:
    import numpy as np

    from execgym.integrations.verl import EPISODE_KEYS, compute_episode_score

    ended = compute_episode_score("d", "", None, {"tool_rewards": np.array([0.0, 0.0, 1.0])})
    never_ended = compute_episode_score("d", "", None, None)
    masked = compute_episode_score(
        "d",
        "",
        None,
        {"tool_rewards": [0.0], "execgym_masked": 1.0, "execgym_verdict": "sandbox_error"},
    )
    assert all(tuple(r) == EPISODE_KEYS for r in (ended, never_ended, masked))
    assert (ended["score"], ended["tool_calls"]) == (1.0, 3.0)
    assert (never_ended["score"], never_ended["masked"]) == (0.0, 0.0)
    assert (masked["score"], masked["masked"], masked["verdict"]) == (0.0, 1.0, "sandbox_error")


async def test_openrlhf_remote_reward_server_bounds_request_bodies() -> None:
    # Found by QA (2026-12-02): docs/integrations.md serves this app on 0.0.0.0 with plain uvicorn,
    # and it had none of `execgym serve`'s body guard: any body was read whole into
    # memory (and a trickled one kept its connection forever). It now has the same
    # limits, from the same EXECGYM_SERVER_* variables; no token (OpenRLHF sends none).
    from execgym.testing import FakeSandbox, fake_result

    environ = {"EXECGYM_SERVER_MAX_BODY_BYTES": "4KiB"}
    async with RewardClient(sandbox=FakeSandbox([fake_result()])) as client:
        app = create_app(client, environ=environ)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://rm") as http:
            big = {"query": ["x" * 8192], "prompts": ["p"], "labels": [ADD_CASES]}
            answer = await http.post("/get_reward", json=big)
            assert answer.status_code == 413
            assert "EXECGYM_SERVER_MAX_BODY_BYTES" in answer.text
            small = await http.post("/get_reward", json={"query": ["a"], "labels": [1, 2]})
            assert small.status_code == 422  # under the limit: the app reads it as before
