"""verl's own SandboxFusion client against a real ``execgym serve``'s ``/run_code``.

Everything here calls verl 0.9.1 from PyPI (pinned in ``.ci/run``), never a copy of it:

- ``verl/utils/reward_score/sandbox_fusion/utils.py``: ``check_correctness`` (one
  ``call_sandbox_api`` request per test case, fanned out by its own
  ``ThreadPoolExecutor``, each call under the ``concurrent_semaphore`` it is given) and
  ``call_sandbox_api``; its verdict codes: ``True``/``False`` (right/wrong output),
  ``-1`` API or sandbox error, ``-2`` runtime error, ``-3`` timeout, ``-4`` compile error;
- ``verl/utils/reward_score/sandbox_fusion/__init__.py``: ``compute_score`` (code-block
  extraction, ``assert_case`` ground truths, the pass fraction);
- ``verl/trainer/ppo/reward.py``: ``load_reward_manager``, which reads
  ``reward.sandbox_fusion.{url, max_concurrent, memory_limit_mb}`` and builds the
  semaphore verl uses (``multiprocessing.Manager().Semaphore(max_concurrent)``), with the
  configuration lines of docs/integrations.md, scored through the reward loop's
  ``NaiveRewardManager.run_single`` (``data_source: codecontests``, which
  ``verl.utils.reward_score.default_compute_score`` sends to SandboxFusion).

The server is a real ``execgym serve`` on a free port (``tests/server/test_serve.py``),
without a token: verl sends no ``Authorization`` header.
"""

from __future__ import annotations

import json
import os
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import CI

try:
    with warnings.catch_warnings():  # ray warns about its own experimental imports
        warnings.simplefilter("ignore", DeprecationWarning)
        import verl
        import verl.trainer.ppo.reward as verl_reward
        from verl.utils.reward_score import sandbox_fusion as verl_sandbox_fusion
        from verl.utils.reward_score.sandbox_fusion import utils as verl_sf_utils
except ImportError as missing:  # skipped here, a failure under CI=1 (.ci/run installs it)
    if CI:
        raise
    pytest.skip(f"verl is not installed ({missing}): see .ci/run", allow_module_level=True)

from omegaconf import OmegaConf

from tests.integrations.test_trainers import CharTokenizer, docs_block, verl_data
from tests.server.conftest import need_language
from tests.server.test_serve import serving

DOUBLE = "n = int(input())\nprint(n * 2)"
STDIO_CASES = {"inputs": ["1\n", "21\n", "-4\n"], "outputs": ["2\n", "42\n", "-8\n"]}


def test_verl_is_the_pinned_release() -> None:
    assert verl.__version__ == "0.9.1"  # the module docstring's file references are 0.9.1's


@pytest.fixture(scope="module")
def run_code_url() -> Iterator[str]:
    """``http://127.0.0.1:PORT/run_code`` of a real ``execgym serve`` (no token)."""
    env = {k: v for k, v in os.environ.items() if k != "EXECGYM_SERVER_TOKEN"}
    with serving(env, "--workers", "2") as url:
        yield f"{url}/run_code"


def check(url: str, in_outs: dict[str, Any], code: str, **kwargs: Any) -> tuple[list, list]:
    """verl's ``check_correctness``, with a semaphore as verl's reward loader passes one."""
    return verl_sf_utils.check_correctness(
        sandbox_fusion_url=url,
        in_outs=json.loads(json.dumps(in_outs)),  # verl may add keys to it
        generation=code,
        concurrent_semaphore=threading.Semaphore(4),
        **kwargs,
    )


def test_call_sandbox_api_gets_a_sandboxfusion_answer(run_code_url: str) -> None:
    answer, error = verl_sf_utils.call_sandbox_api(
        sandbox_fusion_url=run_code_url,
        code=DOUBLE,
        stdin="21\n",
        compile_timeout=10,
        run_timeout=10,
        memory_limit_mb=1024,
        language="python",
    )
    assert error is None
    assert answer["status"] == "Success"
    assert answer["run_result"]["status"] == "Finished"
    assert answer["run_result"]["stdout"] == "42\n"


def test_correct_stdin_stdout_solution_passes_every_case(run_code_url: str) -> None:
    results, metadata = check(run_code_url, STDIO_CASES, DOUBLE)
    assert results == [True, True, True]
    assert [m["status"] for m in metadata] == ["success"] * 3
    assert [m["stdout"] for m in metadata] == ["2\n", "42\n", "-8\n"]


def test_wrong_solution_fails_every_case_it_gets_wrong(run_code_url: str) -> None:
    wrong = "n = int(input())\nprint(n * 2 if n > 0 else n)"  # right for 1 and 21 only
    results, metadata = check(run_code_url, STDIO_CASES, wrong)
    assert results == [True, True, False]
    assert metadata[2]["status"] == "wrong_answer"
    assert metadata[2]["stdout"] == "-4\n"


def test_runtime_error_is_verls_minus_two(run_code_url: str) -> None:
    results, metadata = check(run_code_url, STDIO_CASES, "raise ValueError('no')")
    assert results == [-2, -2, -2]
    assert all("ValueError: no" in m["stderr"] for m in metadata)
    assert all(m["exit_code"] == 1 for m in metadata)


def test_compile_error_is_verls_minus_four(run_code_url: str) -> None:
    from execgym.server.languages import find_toolchains

    need_language(find_toolchains(), "cpp")
    broken = '#include <cstdio>\nint main() { printf("%d\\n", 1) return 0; }'
    results, metadata = check(run_code_url, STDIO_CASES, broken, language="cpp")
    assert results == [-4, -4, -4]
    assert metadata[0]["compile_status"] == "Finished"
    assert "error" in metadata[0]["compile_stderr"]
    fixed = (
        "#include <iostream>\nint main() { long n; std::cin >> n; std::cout << n * 2 << '\\n'; }"
    )
    assert check(run_code_url, STDIO_CASES, fixed, language="cpp")[0] == [True, True, True]


def test_timeout_is_verls_minus_three(run_code_url: str) -> None:
    results, metadata = check(
        run_code_url, {"inputs": ["1\n"], "outputs": ["2\n"]}, "while True:\n    pass", timeout=1
    )
    assert results == [-3]
    assert metadata[0]["status"] == "timeout"
    assert metadata[0]["run_status"] == "TimeLimitExceeded"


def test_call_based_fn_name_through_verls_wrapper(run_code_url: str) -> None:
    """verl wraps the code to read one JSON argument per stdin line and print the result."""
    cases = {"fn_name": "add", "inputs": ["1\n2", "[1]\n[2, 3]"], "outputs": ["3", "[1, 2, 3]"]}
    assert check(run_code_url, cases, "def add(a, b):\n    return a + b")[0] == [True, True]
    method = "class Solution:\n    def add(self, a, b):\n        return a + b"
    assert check(run_code_url, cases, method)[0] == [True, True]
    assert check(run_code_url, cases, "def add(a, b):\n    return b")[0] == [False, False]


def test_assert_case_ground_truth_through_verls_compute_score(run_code_url: str) -> None:
    """``compute_score`` takes the completion's code block and appends each assert_case."""
    truth = json.dumps({"assert_case": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]})
    good = "Here:\n```python\ndef add(a, b):\n    return a + b\n```"
    half = "```python\ndef add(a, b):\n    return a + b if a > 0 else 7\n```"
    semaphore = threading.Semaphore(4)
    score, metadata = verl_sandbox_fusion.compute_score(
        run_code_url, semaphore, 1024, good, truth, continuous=False
    )
    assert score == 1.0
    assert [m["status"] for m in metadata] == ["success", "success"]
    score, metadata = verl_sandbox_fusion.compute_score(
        run_code_url, semaphore, 1024, half, truth, continuous=False
    )
    assert score == 0.5
    assert metadata[1]["status"] == "runtime_error"  # the failed assert exits non-zero
    assert "AssertionError" in metadata[1]["stderr"]


async def test_documented_sandbox_fusion_config_scores_through_verls_reward_loop(
    run_code_url: str,
) -> None:
    """The documented ``reward.sandbox_fusion`` lines, through verl's ``load_reward_manager``."""
    config = OmegaConf.create(docs_block("verl-sandbox-fusion"))
    assert config.reward.sandbox_fusion.url.endswith("/run_code")
    config.reward.sandbox_fusion.url = run_code_url  # the page's host and port, here
    manager = verl_reward.load_reward_manager(config, CharTokenizer())
    # verl built its partial of default_compute_score with our URL and its own semaphore
    assert manager.compute_score.keywords["sandbox_fusion_url"] == run_code_url
    truth = STDIO_CASES
    samples = [
        ("```python\n" + DOUBLE + "\n```", truth),
        ("```python\nprint(int(input()) + 1)\n```", truth),  # right for 1 only
        ("no code at all", truth),
    ]
    data = verl_data(samples, data_source="codecontests")
    scores = [(await manager.run_single(data[i : i + 1]))["reward_score"] for i in range(3)]
    assert scores == [1.0, pytest.approx(1 / 3), 0.0]
