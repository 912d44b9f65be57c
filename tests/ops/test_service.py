"""A real ``execgym serve`` (uvicorn, bwrap sandboxes): ``/metrics`` scraped during a batch
matches its results exactly; a task type whose checker always crashes opens its breaker
and shows in ``execgym status``; the ``/status`` page renders in headless chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from execgym.cli import main
from execgym.tasks import load_dataset
from execgym.testing import free_port
from tests.conftest import require
from tests.server.test_serve import serving

TOKEN = "ops-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    env = {
        **os.environ,
        "EXECGYM_SERVER_TOKEN": TOKEN,
        "EXECGYM_SERVER_BREAKERS": "failures=2,window_s=600,cooldown_s=600,key=dataset",
    }
    # Fresh bwrap sandboxes (no warm pool): a run whose wall-time limit ends before the
    # sandbox starts its harness is then always an infrastructure failure (see below).
    with serving(env, "--log-format", "json", "serve", "--workers", "2", "--no-warm-pool") as url:
        yield url


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"{url}/metrics", headers=HEADERS, timeout=10).text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def total(samples: dict[Any, float], name: str, **labels: str) -> float:
    return sum(
        value
        for (sample, sample_labels), value in samples.items()
        if sample == name and set(labels.items()) <= set(sample_labels)
    )


def by_verdict(samples: dict[Any, float], name: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    for (sample, labels), value in samples.items():
        if sample == name and value:
            counts[dict(labels)["verdict"]] += int(value)
    return counts


def job(url: str, job_id: str) -> dict[str, Any]:
    answer = httpx.get(f"{url}/v1/jobs/{job_id}", headers=HEADERS, timeout=10)
    return answer.json()  # type: ignore[no-any-return]


def test_metrics_scraped_during_a_batch_match_its_results_exactly(server: str) -> None:
    tasks = load_dataset("humaneval")
    rollouts = []
    for number in range(8):
        task = tasks[f"HumanEval/{number}"]
        rollouts.append({"task_id": task.task_id, "completion": task.reference})
        slow_wrong = "    import time\n    time.sleep(0.3)\n    return None\n"
        rollouts.append({"task_id": task.task_id, "completion": slow_wrong})
    rollouts.append({"task_id": "HumanEval/0", "completion": "    raise ValueError('no')\n"})
    rollouts.append({"task_id": "HumanEval/99999", "completion": "    return 1\n"})  # invalid
    before = scrape(server)
    body = {"dataset": "humaneval", "rollouts": rollouts, "wait": False}
    answer = httpx.post(f"{server}/v1/score", json=body, headers=HEADERS, timeout=30)
    assert answer.status_code == 202, answer.text
    job_id = answer.json()["job_id"]
    during = []
    while True:
        finished_before = job(server, job_id)["finished"]
        samples = scrape(server)
        state = job(server, job_id)
        scored = total(samples, "execgym_jobs_completed_total") - total(
            before, "execgym_jobs_completed_total"
        )
        assert finished_before <= scored <= state["finished"]
        during.append(scored)
        if state["state"] == "done":
            break
        time.sleep(0.1)
    assert any(0 < count < len(rollouts) for count in during), during  # seen mid-batch
    after = scrape(server)
    results = state["results"]
    expected = Counter(result["verdict"] for result in results)
    assert expected["passed"] == 8
    assert expected["invalid"] == 1
    assert expected["failed"] + expected["error"] == 9  # a None return can make check raise
    assert (
        by_verdict(after, "execgym_jobs_completed_total")
        - by_verdict(before, "execgym_jobs_completed_total")
        == expected
    )
    assert (
        by_verdict(after, "execgym_rollouts_scored_total")
        - by_verdict(before, "execgym_rollouts_scored_total")
        == expected
    )
    assert by_verdict(after, "execgym_jobs_failed_total") - by_verdict(
        before, "execgym_jobs_failed_total"
    ) == {"invalid": 1}

    def delta(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    assert delta("execgym_jobs_submitted_total", task_type="HumanEval") == 17
    assert delta("execgym_jobs_submitted_total", task_type="unknown") == 1
    assert delta("execgym_jobs_completed_total", task_type="HumanEval") == 17
    assert delta("execgym_queue_lag_seconds_count") == len(rollouts)
    runs = delta("execgym_sandbox_run_seconds_count")
    assert runs >= 17  # one run per judged rollout at least (the checks may add some)
    assert delta("execgym_sandbox_start_seconds_count") == runs
    assert delta("execgym_sandbox_cpu_seconds_count") == runs
    assert delta("execgym_sandbox_peak_memory_bytes_count") == runs
    ran = sum(r["wall_time_s"] or 0 for r in results)  # rounded to 0.1 ms in results
    assert delta("execgym_sandbox_run_seconds_sum") >= ran - 1e-4 * len(results)
    assert ran >= 8 * 0.3
    assert total(after, "execgym_sandboxes_active") == 0
    assert total(after, "execgym_queue_depth") == 0
    beat = total(after, "execgym_worker_last_heartbeat_timestamp_seconds")
    assert time.time() - 30 < beat <= time.time()


def starved_task(number: int, dataset: str = "Starved") -> dict[str, Any]:
    """A task whose sandbox never starts its harness: ``sandbox_error``, an infrastructure
    failure (execgym.judges.masking.counts_toward_breaker). Its wall-time limit, 1 ns, ends every
    run before the harness's start marker; a checker that always fails is no longer one
    (it fails on the task's expected output too: ``invalid``, the task's fault, which a
    breaker never counts, as garbage rollouts could otherwise quarantine a data set)."""
    return {
        "task_id": f"{dataset}/{number}",
        "prompt": "def echo(x):\n",
        "tests": "def check(candidate):\n    assert candidate(1) == 1\n",
        "entry_point": "echo",
        "limits": {"wall_time_s": 1e-9},
    }


def test_a_crashing_task_type_opens_its_breaker_and_status_shows_it(server: str) -> None:
    tasks = [starved_task(i) for i in range(5)]
    good = {
        "task_id": "Echo/1",
        "kind": "stdio",
        "prompt": "print the input",
        "test_cases": [{"input": "1\n", "output": "1\n"}],
    }
    rollouts = [{"task_id": t["task_id"], "completion": "    return x\n"} for t in tasks]
    rollouts.append({"task_id": "Echo/1", "completion": "print(input())"})
    body = {"tasks": [*tasks, good], "rollouts": rollouts}
    answer = httpx.post(f"{server}/v1/score", json=body, headers=HEADERS, timeout=120)
    assert answer.status_code == 200, answer.text
    verdicts = [r["verdict"] for r in answer.json()["results"]]
    # The threshold is 2; with two sandboxes at once, one more may be running as it opens.
    crashed = verdicts.count("sandbox_error")
    assert crashed in (2, 3)
    assert verdicts.count("quarantined") == 5 - crashed
    assert verdicts[-1] == "passed"  # another type is unaffected
    quarantined = next(r for r in answer.json()["results"] if r["verdict"] == "quarantined")
    assert quarantined["reward"] is None
    assert quarantined["wall_time_s"] is None  # nothing ran

    samples = scrape(server)
    assert total(samples, "execgym_breaker_state", task_type="Starved") == 2
    assert total(samples, "execgym_breaker_state", task_type="Echo") == 0

    runner = CliRunner()
    shown = runner.invoke(main, ["status", "--url", server], env={"EXECGYM_SERVER_TOKEN": TOKEN})
    assert shown.exit_code == 0, shown.output
    assert re.search(
        rf"Starved: OPEN, 2 failure\(s\) in 2 job\(s\) in the window, {5 - crashed} quarantined",
        shown.output,
    ), shown.output
    assert "Echo: CLOSED" in shown.output
    assert "breakers: " in shown.output
    assert "healthy, last heartbeat" in shown.output

    refused = runner.invoke(
        main, ["status", "--url", server, "--reset", "Starved"], env={"EXECGYM_SERVER_TOKEN": ""}
    )
    assert refused.exit_code == 1
    assert "HTTP 401" in refused.output
    assert "--token" in refused.output
    unknown = runner.invoke(main, ["status", "--url", server, "--token", TOKEN, "--reset", "Nope"])
    assert unknown.exit_code == 1
    assert "no breaker for task type 'Nope'" in unknown.output
    reset = runner.invoke(main, ["status", "--url", server, "--token", TOKEN, "--reset", "Starved"])
    assert reset.exit_code == 0, reset.output
    assert "breaker Starved: reset, now closed" in reset.output
    assert total(scrape(server), "execgym_breaker_state", task_type="Starved") == 0


def test_status_without_a_target_or_an_unreachable_one_says_what_to_do() -> None:
    runner = CliRunner()
    neither = runner.invoke(main, ["status"])
    assert neither.exit_code == 2
    assert "give either --url (a service) or --broker (a queue)" in neither.output
    port = free_port()
    down = runner.invoke(main, ["status", "--url", f"http://127.0.0.1:{port}"])
    assert down.exit_code == 1
    assert "is `execgym serve` running there?" in down.output


def test_status_page_renders_live_numbers_in_headless_chromium(server: str) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    require(chromium is not None, "chromium (apt-get install chromium)")
    body = {
        "dataset": "humaneval",
        "task_ids": ["HumanEval/0", "HumanEval/1"],
        "solutions": "canonical",
    }
    answer = httpx.post(f"{server}/v1/score", json=body, headers=HEADERS, timeout=60)
    assert answer.status_code == 200, answer.text
    broken = [starved_task(i, "PageBroken") for i in range(3)]
    rollouts = [{"task_id": t["task_id"], "completion": "    return x\n"} for t in broken]
    body = {"tasks": broken, "rollouts": rollouts}
    answer = httpx.post(f"{server}/v1/score", json=body, headers=HEADERS, timeout=60)
    assert answer.status_code == 200, answer.text
    status = httpx.get(f"{server}/v1/status", headers=HEADERS, timeout=10).json()
    assert httpx.get(f"{server}/v1/status", timeout=10).status_code == 401
    page = httpx.get(f"{server}/status", timeout=10)
    assert page.status_code == 200
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page.text)  # no external assets
    argv = [
        chromium,
        "--headless",
        "--no-sandbox",  # as root, chromium refuses to start without it
        "--disable-gpu",
        "--no-first-run",
        f"--user-data-dir={os.environ.get('TMPDIR', '/tmp')}/execgym-ops-chromium-{os.getpid()}",
        "--virtual-time-budget=5000",
        "--dump-dom",
        f"{server}/status#token={TOKEN}",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=90, check=False)
    dom = done.stdout
    assert 'data-loaded="1"' in dom, done.stderr[-2000:]

    def tile(element_id: str) -> str:
        found = re.search(rf'id="{element_id}">([^<]*)<', dom)
        assert found, element_id
        return found.group(1)

    # At least what /v1/status said just before (the page polled after it).
    assert int(tile("completed")) >= status["completed"] >= 2
    assert tile("sandboxes") == "0"
    assert int(tile("programs")) == status["programs"]["completed"]  # /run_code, /v1/run
    assert tile("episodes-live") == str(status["episodes"]["live"])
    assert tile("in-flight").endswith(f"/ {status['in_flight_limit']}")
    assert float(tile("throughput")) > 0
    assert int(tile("open-breakers")) == status["open_breakers"] >= 1, (
        tile("open-breakers"),
        status,
    )
    assert re.search(r'<td>PageBroken</td><td class="open">open</td><td>2</td>', dom), dom
    passed = re.search(r"<td>passed</td><td>(\d+)</td>", dom)
    assert passed is not None
    assert int(passed.group(1)) >= status["verdicts"]["passed"]
    assert re.search(r'<td class="healthy">healthy</td>', dom)
    assert json.dumps(status)  # the JSON the page reads is plain data
