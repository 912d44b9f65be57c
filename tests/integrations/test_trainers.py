"""The adapters driven through the trainers' own code, imported from PyPI (pinned in .ci/run).

- verl 0.9.1: its custom-reward loader (``verl.trainer.ppo.reward.get_custom_reward_fn``
  and ``load_reward_manager``), its reward loop's ``NaiveRewardManager.run_single`` and
  ``RewardLoopWorker.compute_score_batch``, the aggregation of
  ``RewardLoopManager.compute_rm_score`` (``np.array([info[key] for info in infos])``
  with the first sample's keys), and the legacy ``NaiveRewardManager`` /
  ``BatchRewardManager`` (``verl/workers/reward_manager/``) that ``reward_manager=batch``
  runs. Two stand-ins, each named where used: a character-level tokenizer (verl only
  calls ``decode``; a real one would come from the Hugging Face hub), and
  ``ray.get`` as the identity in ``compute_rm_score`` (its workers run in this
  process, not as Ray actors).
- OpenRLHF 0.11.2: ``SingleTurnAgentExecutor`` (``openrlhf/utils/agent.py``) loading
  ``reward_func`` from our file exactly as OpenRLHF does, and posting to our HTTP
  reward server (started on a free port), through ``execute`` with a stand-in engine.
- TRL 1.16.0: ``GRPOTrainer._calculate_rewards`` with our reward function, plain and
  conversational completions, on a stand-in ``self`` (building a real trainer needs a
  model and a tokenizer from the hub).
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from tests.conftest import CI, require

try:
    with warnings.catch_warnings():  # ray warns about its own experimental imports
        warnings.simplefilter("ignore", DeprecationWarning)
        import openrlhf.utils.agent as openrlhf_agent
        import torch
        import trl.trainer.grpo_trainer as trl_grpo
        import verl.trainer.ppo.reward as verl_reward
except ImportError as missing:  # skipped here, a failure under CI=1 (.ci/run installs them)
    if CI:
        raise
    pytest.skip(f"the trainers are not installed ({missing}): see .ci/run", allow_module_level=True)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.experimental.reward_loop import reward_loop as verl_reward_loop
    from verl.workers.reward_manager.batch import BatchRewardManager
    from verl.workers.reward_manager.naive import NaiveRewardManager as LegacyNaive

import execgym.integrations.verl as verl_adapter

INTEGRATIONS_DOC = Path(__file__).parents[2] / "docs" / "integrations.md"
ADD_CASES = {"assert_case": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]}
GOOD = "Here it is:\n```python\ndef add(a, b):\n    return a + b\n```<|im_end|>"
WRONG = "```python\ndef add(a, b):\n    return a - b\n```"
TAMPERED = (
    "```python\nclass _Any:\n    def __eq__(self, other): return True\n"
    "def add(a, b):\n    return _Any()\n```"
)


@pytest.fixture(autouse=True)
def _bwrap() -> None:
    import shutil

    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")


class CharTokenizer:
    """A tokenizer of one id per character (verl calls only ``decode``); 0 is padding."""

    pad_token_id = 0

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: Any, skip_special_tokens: bool = True) -> str:
        return "".join(chr(int(i)) for i in ids if int(i) != 0)


def verl_data(samples: list[tuple[str, Any]], data_source: str = "execgym") -> DataProto:
    """A DataProto as verl's rollout leaves it: left-padded prompts, right-padded responses."""
    tok = CharTokenizer()
    prompts = [tok.encode("Write add.") for _ in samples]
    responses = [tok.encode(text) for text, _ in samples]
    p_len, r_len = max(map(len, prompts)), max(map(len, responses))
    prompt_ids = torch.zeros(len(samples), p_len, dtype=torch.long)
    response_ids = torch.zeros(len(samples), r_len, dtype=torch.long)
    mask = torch.zeros(len(samples), p_len + r_len, dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        prompt_ids[i, p_len - len(p) :] = torch.tensor(p)
        response_ids[i, : len(r)] = torch.tensor(r)
        mask[i, p_len - len(p) : p_len + len(r)] = 1
    truths = [t if isinstance(t, str) else json.dumps(t) for _, t in samples]
    return DataProto.from_dict(
        tensors={
            "prompts": prompt_ids,
            "responses": response_ids,
            "attention_mask": mask,
            "input_ids": torch.cat([prompt_ids, response_ids], dim=1),
        },
        non_tensors={
            "data_source": np.array([data_source] * len(samples), dtype=object),
            "reward_model": np.array([{"ground_truth": t} for t in truths], dtype=object),
            "extra_info": np.array([{"index": i} for i in range(len(samples))], dtype=object),
        },
    )


def docs_block(marker: str) -> str:
    """The fenced block after ``<!-- marker -->`` in docs/integrations.md."""
    text = INTEGRATIONS_DOC.read_text()
    match = re.search(rf"<!-- {marker} -->\s*```[a-z]*\n(.*?)\n```", text, re.DOTALL)
    assert match, f"docs/integrations.md has no block marked <!-- {marker} -->"
    return match.group(1)


def verl_config(name: str, reward: str = "binary", manager: str = "naive") -> Any:
    """verl's reward config from the integration page's lines, with ``name``, ``reward`` set."""
    config = OmegaConf.create(docs_block("verl-config"))
    config.reward.custom_reward_function.name = name
    config.reward.custom_reward_function.reward_kwargs.reward = reward
    config.reward.reward_manager.name = manager
    return config


MIX = [(GOOD, ADD_CASES), (WRONG, ADD_CASES), ("not json", None), (TAMPERED, ADD_CASES)]


def mixed_batch(size: int) -> list[tuple[str, Any]]:
    """Passed, failed, masked (unreadable ground truth) and tampered samples, in turn."""
    out = []
    for i in range(size):
        text, truth = MIX[i % len(MIX)]
        out.append((GOOD, "not json") if truth is None else (text, truth))
    return out


EXPECTED = {"binary": [1.0, 0.0, 0.0, 0.0], "fraction": [1.0, 0.0, 0.0, 0.0]}


def test_documented_verl_lines_load_through_verls_loader() -> None:
    config = verl_config("compute_score")
    assert config.reward.custom_reward_function.path == "pkg://execgym.integrations.verl"
    fn = verl_reward.get_custom_reward_fn(config)
    result = fn(data_source="mbpp", solution_str=GOOD, ground_truth=json.dumps(ADD_CASES))
    assert (result["score"], result["verdict"]) == (1.0, "passed")
    # the file path works as well (verl releases without pkg:// paths)
    config.reward.custom_reward_function.path = verl_adapter.__file__
    assert (
        verl_reward.get_custom_reward_fn(config)(
            data_source="mbpp", solution_str=WRONG, ground_truth=ADD_CASES
        )["score"]
        == 0.0
    )


TWO_SUM = (
    "```python\nclass Solution:\n    def twoSum(self, nums, target):\n"
    "        seen = {}\n        for i, n in enumerate(nums):\n"
    "            if target - n in seen:\n                return [seen[target - n], i]\n"
    "            seen[n] = i\n```<|im_end|>"
)
ADD_SUB = "```python\ndef add(a, b):\n    return a + b\ndef sub(a, b):\n    return a - b\n```"


def leetcode_rows(count: int) -> list[dict[str, Any]]:
    """The first rows of LeetCodeDataset v0.3.1 (shipped with execgym), as on the hub."""
    import gzip

    from execgym.tasks.datasets._files import data_path

    path = data_path("leetcodedataset", "LeetCodeDataset-v0.3.1-test.jsonl.gz")
    with gzip.open(path, "rt") as lines:
        return [json.loads(line) for _, line in zip(range(count), lines, strict=False)]


def test_ground_truth_shapes_through_verls_loader() -> None:
    fn = verl_reward.get_custom_reward_fn(verl_config("compute_score"))

    def verdict(solution: str, truth: Any) -> str:
        return fn(data_source="t", solution_str=solution, ground_truth=json.dumps(truth))["verdict"]

    # verl's assert_case as LeetCode-style data sets write it, and several functions
    assert_two_sum = {"assert_case": ["assert Solution().twoSum([2, 7, 11, 15], 9) == [0, 1]"]}
    assert verdict(TWO_SUM, assert_two_sum) == "passed"
    assert verdict(WRONG, assert_two_sum) != "passed"
    both = {"assert_case": ["assert add(1, 2) == 3", "assert sub(3, 1) == 2"]}
    assert verdict(ADD_SUB, both) == "passed"
    helper = {
        "assert_case": [
            "def near(a, b):\n    return abs(a - b) < 1e-9",
            "assert near(add(0.1, 0.2), 0.3)",
        ]
    }
    assert verdict(ADD_SUB, helper) == "passed"
    # APPS / TACO raw call-based: the argument list is spread, LeetCode classes too
    apps = {
        "fn_name": "twoSum",
        "inputs": [[[2, 7, 11, 15], 9], [[3, 3], 6]],
        "outputs": [[[0, 1]], [[0, 1]]],
    }
    assert verdict(TWO_SUM, apps) == "passed"
    assert verdict(TWO_SUM.replace("[seen[target - n], i]", "[i, i]"), apps) == "failed"
    # LeetCodeDataset rows (prompt, test, entry_point "Solution().method")
    for row in leetcode_rows(3):
        truth = {k: row[k] for k in ("prompt", "test", "entry_point")}
        assert verdict(f"```python\n{row['completion']}\n```", truth) == "passed", row["task_id"]
        assert verdict("```python\nclass Solution:\n    pass\n```", truth) == "error"


@pytest.mark.parametrize("reward", ["binary", "fraction", "quality"])
async def test_64_samples_through_verls_reward_loop_aggregation(
    reward: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """load_reward_manager -> RewardLoopWorker.compute_score_batch -> compute_rm_score."""
    name = "compute_score_async"
    config = verl_config(name, reward)
    manager = verl_reward.load_reward_manager(config, CharTokenizer())
    worker = verl_reward_loop.RewardLoopWorker.__new__(verl_reward_loop.RewardLoopWorker)
    worker.config, worker.reward_manager, worker.loop = config, manager, asyncio.get_running_loop()
    data = verl_data(mixed_batch(64))
    outputs = await worker.compute_score_batch(data)  # verl's own per-sample fan-out
    # RewardLoopManager.compute_rm_score, with its Ray workers replaced by these outputs
    monkeypatch.setattr(verl_reward_loop, "ray", SimpleNamespace(get=lambda refs: refs))
    fake = SimpleNamespace(
        reward_model_manager=None,
        reward_loop_workers=[
            SimpleNamespace(compute_score_batch=SimpleNamespace(remote=lambda chunk: outputs))
        ],
        reward_manager_cls=type(manager),
    )
    scored = verl_reward_loop.RewardLoopManager.compute_rm_score(fake, data)
    rewards, infos = verl_reward.extract_reward(scored)
    assert rewards.shape == data.batch["responses"].shape
    keys = set(verl_adapter.score_keys(reward))
    assert set(infos) == keys
    for key, values in infos.items():  # ray_trainer.py: assert len(lst) == len(sample_scores)
        assert len(values) == 64, key
    scores = infos["score"].tolist()
    masked = infos["masked"].tolist()
    assert masked == [1.0 if i % 4 == 2 else 0.0 for i in range(64)]
    assert infos["tampered"].tolist() == [1.0 if i % 4 == 3 else 0.0 for i in range(64)]
    if reward in EXPECTED:
        assert scores == EXPECTED[reward] * 16
    else:  # quality: gated on passing, components measured for the passed ones
        assert all(0.0 < s <= 1.0 for s in scores[0::4])
        assert all(s == 0.0 for i, s in enumerate(scores) if i % 4)
        assert all(v is None for v in infos["reward/efficiency"][2::4])  # masked: not measured
    assert float(rewards.sum()) == pytest.approx(sum(scores), abs=1e-5)
    # verl's validation metrics over these keys (metric_utils.process_validation_metrics)
    from verl.trainer.ppo.metric_utils import process_validation_metrics

    lists = {key: list(values) for key, values in infos.items()}
    metrics = process_validation_metrics(["execgym"] * 64, [str(i % 8) for i in range(64)], lists)
    assert set(metrics["execgym"]) >= {"score", "masked", "reward/correctness"}


@pytest.mark.parametrize("reward", ["binary", "quality"])
def test_verl_legacy_naive_and_batch_managers(reward: str) -> None:
    """verl/workers/reward_manager/{naive,batch}.py, the managers of reward_manager=batch."""
    samples = mixed_batch(8)
    single = verl_reward.get_custom_reward_fn(verl_config("compute_score", reward))
    batch = verl_reward.get_custom_reward_fn(verl_config("compute_score_batch", reward))
    naive_out = LegacyNaive(CharTokenizer(), 0, compute_score=single)(
        verl_data(samples), return_dict=True
    )
    batch_out = BatchRewardManager(CharTokenizer(), 0, compute_score=batch)(
        verl_data(samples), return_dict=True
    )
    keys = set(verl_adapter.score_keys(reward))
    for out in (naive_out, batch_out):
        assert set(out["reward_extra_info"]) == keys
        assert all(len(v) == len(samples) for v in out["reward_extra_info"].values())
    assert naive_out["reward_extra_info"]["score"] == batch_out["reward_extra_info"]["score"]
    assert batch_out["reward_extra_info"]["masked"] == [0.0, 0.0, 1.0, 0.0] * 2
    assert torch.equal(naive_out["reward_tensor"], batch_out["reward_tensor"])


async def test_verl_multi_turn_reward_reaches_the_reward_function() -> None:
    """ToolAgentLoop._call_tool -> tool_rewards -> reward loop -> compute_episode_score."""
    from verl.experimental.agent_loop.tool_agent_loop import AgentData, ToolAgentLoop
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
    from verl.tools.tool_registry import initialize_tools_from_config

    from execgym.integrations.verl_tool import EpisodeTool, close_episode_tools
    from tests.episode_scripts import PAGER, solution

    shipped = Path(__file__).parents[2] / "deploy" / "verl" / "episode_tools.yaml"
    tools = {tool.name: tool for tool in initialize_tools_from_config(str(shipped))}
    assert all(isinstance(tool, EpisodeTool) for tool in tools.values())
    # the attributes ToolAgentLoop._call_tool reads from its config
    loop_self = SimpleNamespace(
        tools=tools, max_tool_response_length=100_000, tool_response_truncate_side="middle"
    )
    agent_data = AgentData(
        messages=[],
        image_data=None,
        video_data=None,
        audio_data=None,
        mm_processor_kwargs=None,
        metrics={},
        request_id="trajectory-1",
        tools_kwargs={name: {"create_kwargs": {"task_id": PAGER}} for name in tools},
    )
    from verl.experimental.agent_loop.tool_agent_loop import FunctionCall

    for action in solution():
        call = FunctionCall(name=action["tool"], arguments=json.dumps(action["arguments"]))
        _, tool_reward, _ = await ToolAgentLoop._call_tool(
            loop_self, call, agent_data.tools_kwargs, agent_data
        )
        if tool_reward is not None:  # tool_agent_loop.py, _handle_processing_tools_state
            agent_data.tool_rewards.append(tool_reward)
    await close_episode_tools()
    # ToolAgentLoop.run: AgentLoopOutput(extra_fields=agent_data.extra_fields), then
    # output.extra_fields.update({"turn_scores": ..., "tool_rewards": ...})
    extra_fields = {
        **agent_data.extra_fields,
        "turn_scores": agent_data.turn_scores,
        "tool_rewards": agent_data.tool_rewards,
    }
    config = verl_config("compute_episode_score")
    manager = verl_reward.load_reward_manager(config, CharTokenizer())
    assert isinstance(manager, NaiveRewardManager)
    data = verl_data([("(trajectory)", {"task_id": PAGER})])
    data.non_tensor_batch["tool_extra_fields"] = np.array([extra_fields], dtype=object)
    result = await manager.run_single(data)
    info = result["reward_extra_info"]
    assert result["reward_score"] == 1.0
    assert (info["masked"], info["verdict"], info["acc"]) == (0.0, "passed", 1.0)
    # an older verl exports only tool_rewards: the reward still arrives
    data.non_tensor_batch["tool_extra_fields"] = np.array(
        [{"turn_scores": [], "tool_rewards": agent_data.tool_rewards}], dtype=object
    )
    assert (await manager.run_single(data))["reward_score"] == 1.0


# ---- OpenRLHF ------------------------------------------------------------------------


def _openrlhf_agent() -> Any:
    return openrlhf_agent


class _Engine:
    """vLLM's ``generate`` answering ``response`` (token ids: characters)."""

    def __init__(self, response: str) -> None:
        self.response = response

    async def generate(self, prompt_ids: list[int], params: Any, multi_modal_data: Any = None):
        ids = [ord(c) for c in self.response]
        output = SimpleNamespace(token_ids=ids, finish_reason="stop", logprobs=None)
        return SimpleNamespace(outputs=[output])


class _HFTokenizer(CharTokenizer):
    def __call__(self, text: str, add_special_tokens: bool = False, return_tensors: str = "pt"):
        return {"input_ids": torch.tensor([self.encode(text)])}


CHAT_PROMPT = "<|im_start|>user\nWrite add.<|im_end|>\n<|im_start|>assistant\n"


async def _execute(executor: Any, response: str, label: Any) -> dict[str, Any]:
    params = SimpleNamespace(max_tokens=256, logprobs=None)
    return await executor.execute(
        CHAT_PROMPT, label, params, 4096, _HFTokenizer(), _Engine(response)
    )


def openrlhf_path() -> str:
    """The integration page's ``--remote_rm_url`` file, resolved as the page says."""
    line = docs_block("openrlhf-file")
    assert "--remote_rm_url" in line
    import execgym.integrations.openrlhf as module

    return module.__file__


async def test_openrlhf_file_mode_through_its_executor() -> None:
    agent = _openrlhf_agent()
    executor = agent.SingleTurnAgentExecutor(remote_rm_url=openrlhf_path())
    assert executor.reward_func is not None  # loaded by spec_from_file_location
    label = json.dumps(ADD_CASES)
    good = await _execute(executor, GOOD, label)  # decoded with special tokens kept
    wrong = await _execute(executor, WRONG, label)
    assert good["reward"] is not None  # OpenRLHF swallows errors as reward None
    assert [float(good["reward"][0]), float(wrong["reward"][0])] == [1.0, 0.0]
    unclosed = await _execute(
        executor, "```python\ndef add(a, b):\n    return a + b<|im_end|>", label
    )
    assert float(unclosed["reward"][0]) == 1.0


@pytest.fixture
def openrlhf_server() -> Iterator[str]:
    import uvicorn

    from execgym.integrations.openrlhf import create_app

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the reward server did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/get_reward"
    server.should_exit = True
    thread.join(10)


async def test_openrlhf_http_mode_through_its_executor(openrlhf_server: str) -> None:
    agent = _openrlhf_agent()
    assert "--remote_rm_url http://" in docs_block("openrlhf-http")
    executor = agent.SingleTurnAgentExecutor(remote_rm_url=openrlhf_server)
    assert executor.reward_func is None
    label = json.dumps(ADD_CASES)
    results = [await _execute(executor, text, label) for text in (GOOD, WRONG, TAMPERED)]
    assert [r["reward"][0] for r in results] == [1.0, 0.0, 0.0]
    assert results[2]["extra_logs"]["tampered"] == 1.0


# ---- TRL -----------------------------------------------------------------------------


def _calculate_rewards(
    reward_funcs: list[Any], inputs, prompts, completions, envs=None, async_loop=None
):
    grpo = trl_grpo
    fake = SimpleNamespace(
        async_loop=async_loop,
        accelerator=SimpleNamespace(device=torch.device("cpu"), is_main_process=True),
        reward_funcs=reward_funcs,
        reward_processing_classes=[None] * len(reward_funcs),
        reward_func_names=[getattr(f, "__name__", "f") for f in reward_funcs],
        state=SimpleNamespace(global_step=0),
        args=SimpleNamespace(report_to=[]),
        _log_completion_extra=lambda *a, **k: None,
        _log_metric=lambda *a, **k: None,
        environments=envs,
    )
    ids = [[1] for _ in completions]
    return grpo.GRPOTrainer._calculate_rewards(fake, inputs, prompts, completions, ids)


def trl_reward_funcs() -> list[Any]:
    """``reward_funcs`` from the integration page's TRL line."""
    namespace: dict[str, Any] = {}
    exec(docs_block("trl-reward"), namespace)  # the page's import and list, as written
    return namespace["reward_funcs"]


def test_trl_reward_call_plain_and_conversational_humaneval_columns() -> None:
    (reward,) = trl_reward_funcs()
    prompt = 'from typing import List\n\n\ndef add(x: int, y: int):\n    """Add."""\n'
    row = {
        "task_id": "HumanEval/53",
        "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n",
        "entry_point": "add",
    }
    good = "```python\ndef add(x: int, y: int) -> List[int]:\n    return x + y\n```"
    plain = _calculate_rewards(
        [reward], [{"prompt": prompt, **row}] * 2, [prompt] * 2, [good, WRONG]
    )
    assert plain[:, 0].tolist() == [1.0, 0.0]
    chat_prompt = [{"role": "user", "content": prompt}]
    chat = [[{"role": "assistant", "content": good}], [{"role": "assistant", "content": "hi"}]]
    conv = _calculate_rewards(
        [reward], [{"prompt": chat_prompt, **row}] * 2, [chat_prompt] * 2, chat
    )
    assert conv[:, 0].tolist() == [1.0, 0.0]
    # a sample without tests is None, which TRL turns into NaN (left out), never 0.0
    bare = _calculate_rewards([reward], [{"prompt": "p", "x": 1}], ["p"], [good])
    assert torch.isnan(bare[0, 0])
    # make_async_reward on TRL's async path (run on the trainer's own event loop thread)
    from execgym.integrations.trl import make_async_reward

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        both = _calculate_rewards(
            [reward, make_async_reward("binary")],
            [{"prompt": prompt, **row}] * 2,
            [prompt] * 2,
            [good, WRONG],
            async_loop=loop,
        )
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
    assert both.tolist() == [[1.0, 1.0], [0.0, 0.0]]


def test_trl_environment_get_reward_is_a_reward_source_not_a_tool() -> None:
    import inspect

    from execgym.integrations.trl_env import episode_environment
    from tests.episode_scripts import PAGER, solution

    factory = episode_environment(task_id=PAGER)
    env = factory()
    # GRPOTrainer.__init__ (trl/trainer/grpo_trainer.py, TRL 1.16.0): get_reward and
    # reset are never tools; an env class with get_reward becomes a reward function
    members = dict(inspect.getmembers(env, predicate=inspect.ismethod))
    assert "get_reward" in members
    tools = [n for n in members if n not in ("reset", "get_reward") and not n.startswith("_")]
    assert "get_reward" not in tools
    env_type = type(env)

    def get_reward(environments, _env_type=env_type, **kwargs):
        return [e.get_reward() if type(e) is _env_type else None for e in environments]

    try:
        env.reset(prompt="fix it", task_id=PAGER)
        for action in solution():
            getattr(env, action["tool"])(**action["arguments"])
        rewards = _calculate_rewards([get_reward], [{"prompt": "p"}], ["p"], ["done"], [env])
        assert rewards[:, 0].tolist() == [1.0]
    finally:
        env._close()
    assert not hasattr(episode_environment(get_reward=False)(), "get_reward")
