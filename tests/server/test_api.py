"""The /v1 API, auth, limits, capacity, health, metrics and the OpenAPI spec."""

from __future__ import annotations

import asyncio
import base64

import httpx
import pytest

from execgym.errors import ConfigError
from execgym.sandbox import RunRequest, RunResult, Status
from execgym.server import ServerSettings
from execgym.server.languages import Toolchains
from execgym.testing import FakeCall, FakeSandbox, fake_result
from tests.conftest import ONE_TASK
from tests.server.conftest import NO_TOOLS, need_language, serving


def fake() -> FakeSandbox:
    return FakeSandbox([fake_result()])


# --- /v1/score and /v1/jobs -------------------------------------------------------------


async def test_score_sync_with_one_bad_rollout(bwrap_client: httpx.AsyncClient) -> None:
    body = {
        "tasks": [ONE_TASK, {"task_id": "broken"}, ["not", "a", "task"]],
        "rollouts": [
            {"task_id": "t/1", "completion": "    return 1\n"},
            {"task_id": "t/1", "completion": "    return 2\n"},
            {"task_id": "t/1"},
            {"task_id": "broken", "completion": "x"},
            {"task_id": "nope", "completion": "x"},
            "not an object",
        ],
    }
    response = await bwrap_client.post("/v1/score", json=body)
    assert response.status_code == 200, response.text
    job = response.json()
    assert job["state"] == "done"
    assert job["total"] == job["finished"] == 6
    verdicts = [result["verdict"] for result in job["results"]]
    assert verdicts == ["passed", "failed", "invalid", "invalid", "invalid", "invalid"]
    assert [result["reward"] for result in job["results"]] == [1.0, 0.0, None, None, None, None]
    assert "completion" in job["results"][2]["message"]
    assert "invalid" in job["results"][3]["message"]
    assert job["counts"] == {"passed": 1, "failed": 1, "invalid": 4}


async def test_score_dataset_canonical_async(bwrap_client: httpx.AsyncClient) -> None:
    ids = ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    body = {"dataset": "humaneval", "task_ids": ids, "solutions": "canonical", "wait": False}
    accepted = await bwrap_client.post("/v1/score", json=body)
    assert accepted.status_code == 202, accepted.text
    job_id = accepted.json()["job_id"]
    assert accepted.headers["location"] == f"/v1/jobs/{job_id}"
    for _ in range(200):
        job = (await bwrap_client.get(f"/v1/jobs/{job_id}")).json()
        if job["state"] == "done":
            break
        await asyncio.sleep(0.05)
    assert job["state"] == "done"
    assert [r["task_id"] for r in job["results"]] == ids
    assert {r["verdict"] for r in job["results"]} == {"passed"}


async def test_score_usage_errors_are_422() -> None:
    async with serving(settings=ServerSettings(), sandbox=fake(), toolchains=NO_TOOLS) as client:
        neither = await client.post("/v1/score", json={"rollouts": []})
        assert neither.status_code == 422
        assert "either tasks" in neither.json()["message"]
        unknown = await client.post(
            "/v1/score",
            json={"dataset": "humaneval", "task_ids": ["HumanEval/9999"], "solutions": "canonical"},
        )
        assert unknown.status_code == 422
        assert "HumanEval/9999" in unknown.json()["message"]
        missing = await client.get("/v1/jobs/nope")
        assert missing.status_code == 404
        assert missing.json()["error"] == "http_404"
    small = ServerSettings(max_in_flight=2)
    async with serving(settings=small, sandbox=fake(), toolchains=NO_TOOLS) as client:
        rollouts = [{"task_id": "t/1", "completion": "x"}] * 3
        too_big = await client.post("/v1/score", json={"tasks": [ONE_TASK], "rollouts": rollouts})
        assert too_big.status_code == 422  # never fits: retrying would not help
        assert "split the batch" in too_big.json()["message"]


# --- /v1/run ------------------------------------------------------------------------------


async def test_run_reports_output_and_usage(bwrap_client: httpx.AsyncClient) -> None:
    body = {
        "language": "python",
        "code": "import sys\nprint(sys.stdin.read().strip()[::-1])\nopen('o', 'w').write('x')",
        "stdin": "abc",
        "fetch_files": ["o"],
        "limits": {"wall_time_s": 5, "memory_bytes": 256 * 1024 * 1024},
    }
    answer = (await bwrap_client.post("/v1/run", json=body)).json()
    assert answer["status"] == "ok", answer
    assert answer["compile"] is None
    run = answer["run"]
    assert run["stdout"] == "cba\n"
    assert run["exit_code"] == 0
    assert run["wall_time_s"] > 0
    assert run["cpu_time_s"] >= 0
    assert run["peak_memory_bytes"] > 0
    assert base64.b64decode(answer["files"]["o"]) == b"x"
    assert answer["isolation"] == "bwrap"
    assert "memory_bytes" in answer["enforcement"]


@pytest.mark.parametrize(
    ("language", "code", "expected"),
    [
        (
            "java",
            'public class Hi { public static void main(String[] a) { System.out.println("j"); } }',
            "j\n",
        ),
        ("rust", 'fn main() { println!("r"); }', "r\n"),
        ("nodejs", "console.log('n')", "n\n"),
        ("typescript", "const t: string = 't';\nconsole.log(t);", "t\n"),
        ("go", 'package main\nimport "fmt"\nfunc main() { fmt.Println("g") }\n', "g\n"),
        ("pytest", "def test_one():\n    assert 1 == 1\n", "1 passed"),
    ],
)
async def test_run_other_languages(
    bwrap_client: httpx.AsyncClient, toolchains: Toolchains, language: str, code: str, expected: str
) -> None:
    need_language(toolchains, language)
    body = {"language": language, "code": code, "compile_timeout_s": 30}
    answer = (await bwrap_client.post("/v1/run", json=body)).json()
    assert answer["status"] == "ok", answer
    assert expected in answer["run"]["stdout"]


async def test_run_compile_error_and_timeout(
    bwrap_client: httpx.AsyncClient, toolchains: Toolchains
) -> None:
    need_language(toolchains, "cpp")
    broken = (await bwrap_client.post("/v1/run", json={"language": "cpp", "code": "nope"})).json()
    assert broken["status"] == "compile_error"
    assert broken["compile"]["status"] == "runtime_error"
    assert broken["run"] is None
    loop = "int main(){ volatile long i = 0; for(;;) i++; }"
    slow = await bwrap_client.post(
        "/v1/run", json={"language": "cpp", "code": loop, "limits": {"wall_time_s": 0.5}}
    )
    answer = slow.json()
    assert answer["status"] == "time_limit", answer
    assert answer["compile"]["status"] == "ok"
    assert answer["run"]["limit_hit"] == "wall_time_s"


async def test_run_unavailable_is_501_and_sandbox_error_is_503() -> None:
    async with serving(settings=ServerSettings(), sandbox=fake(), toolchains=NO_TOOLS) as client:
        unavailable = await client.post("/v1/run", json={"language": "go", "code": ""})
        assert unavailable.status_code == 501
        assert "apt-get install golang-go" in unavailable.json()["message"]
        unknown = await client.post("/v1/run", json={"language": "cobol", "code": ""})
        assert unknown.status_code == 422
        languages = (await client.get("/v1/languages")).json()
        assert languages["python"] == "available"
        assert languages["cpp"] == "missing g++"
    broken = FakeSandbox([fake_result(Status.SANDBOX_ERROR, message="no cgroup")])
    async with serving(settings=ServerSettings(), sandbox=broken, toolchains=NO_TOOLS) as client:
        failed = await client.post("/v1/run", json={"language": "python", "code": "print(1)"})
        assert failed.status_code == 503
        assert failed.json()["message"] == "no cgroup"


# --- auth, body limit, capacity -----------------------------------------------------------


async def test_bearer_token() -> None:
    settings = ServerSettings(token="s3cret")
    async with serving(settings=settings, sandbox=fake(), toolchains=NO_TOOLS) as client:
        assert (await client.get("/healthz")).status_code == 200
        refused = await client.get("/v1/ping")
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"] == "Bearer"
        wrong = await client.get("/v1/ping", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        right = await client.get("/v1/ping", headers={"Authorization": "Bearer s3cret"})
        assert right.status_code == 200
        assert (await client.get("/metrics")).status_code == 401


async def test_body_limit_is_413() -> None:
    settings = ServerSettings(max_body_bytes=1000)
    async with serving(settings=settings, sandbox=fake(), toolchains=NO_TOOLS) as client:
        big = {"code": "x" * 2000, "language": "python"}
        declared = await client.post("/run_code", json=big)
        assert declared.status_code == 413
        assert "1000 bytes" in declared.json()["message"]

        async def chunks():  # no Content-Length: counted while read
            for _ in range(3):
                yield b"x" * 600

        streamed = await client.post("/run_code", content=chunks())
        assert streamed.status_code == 413
        small = await client.post("/run_code", json={"code": "print(1)", "language": "python"})
        assert small.status_code == 200
        # A batch too large says the limit, its setting, and how to send it anyway.
        rollouts = [{"task_id": "t/1", "completion": "    return 1\n"}] * 40
        batch = await client.post("/v1/score", json={"tasks": [ONE_TASK], "rollouts": rollouts})
        assert batch.status_code == 413
        message = batch.json()["message"]
        assert "1000 bytes" in message, message
        assert "--max-body" in message, message
        assert "several POST /v1/score requests" in message, message
        assert f"at most {settings.max_batch} rollouts" in message, message
        assert "execgym score" in message, message


async def test_full_capacity_is_429_with_retry_after() -> None:
    release = asyncio.Event()
    started = asyncio.Event()

    async def blocked(call: FakeCall) -> object:
        started.set()
        await release.wait()
        return fake_result(stdout=b"done\n")

    class Blocking(FakeSandbox):
        async def run(self, request: RunRequest) -> RunResult:
            self.calls.append(FakeCall(list(request.argv), b"", {}, request.limits, False))
            return await blocked(self.calls[-1])

    settings = ServerSettings(max_in_flight=1, workers=1)
    async with serving(settings=settings, sandbox=Blocking([]), toolchains=NO_TOOLS) as client:
        body = {"code": "print(1)", "language": "python"}
        first = asyncio.create_task(client.post("/run_code", json=body))
        await asyncio.wait_for(started.wait(), 5)
        second = await client.post("/run_code", json=body)
        assert second.status_code == 429
        assert int(second.headers["retry-after"]) >= 1
        assert "capacity" in second.json()["message"]
        batch = {"tasks": [ONE_TASK], "rollouts": [{"task_id": "t/1", "completion": "x"}]}
        assert (await client.post("/v1/score", json=batch)).status_code == 429
        release.set()
        assert (await first).json()["run_result"]["stdout"] == "done\n"
        metrics = (await client.get("/metrics")).text
        assert "execgym_rejected_total 2.0" in metrics


# --- health, readiness, metrics, OpenAPI ----------------------------------------------------


async def test_readyz_runs_the_self_test(bwrap_client: httpx.AsyncClient) -> None:
    ready = await bwrap_client.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json() == {"status": "ready"}


async def test_readyz_fails_when_the_sandbox_is_broken() -> None:
    broken = FakeSandbox([fake_result(Status.SANDBOX_ERROR, message="bwrap: no permission")])
    async with serving(settings=ServerSettings(), sandbox=broken, toolchains=NO_TOOLS) as client:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        not_ready = await client.get("/readyz")
        assert not_ready.status_code == 503
        assert "self-test" in not_ready.json()["message"]


async def test_metrics_count_requests_and_programs() -> None:
    async with serving(settings=ServerSettings(), sandbox=fake(), toolchains=NO_TOOLS) as client:
        await client.post("/run_code", json={"code": "print(1)", "language": "python"})
        text = (await client.get("/metrics")).text
    assert 'execgym_http_requests_total{method="POST",route="/run_code",status="200"} 1.0' in text
    assert 'execgym_programs_total{language="python",status="ok"} 1.0' in text
    assert "execgym_in_flight_limit 10000.0" in text


async def test_openapi_lists_every_route() -> None:
    async with serving(settings=ServerSettings(), sandbox=fake(), toolchains=NO_TOOLS) as client:
        spec = (await client.get("/openapi.json")).json()
        docs = await client.get("/docs")
    paths = set(spec["paths"])
    assert paths == {
        "/healthz",
        "/readyz",
        "/metrics",
        "/status",
        "/v1/status",
        "/v1/breakers/{task_type}/reset",
        "/v1/ping",
        "/run_code",
        "/v1/run",
        "/v1/languages",
        "/v1/score",
        "/v1/jobs/{job_id}",
        "/v1/episodes",
        "/v1/episodes/{episode_id}",
        "/v1/episodes/{episode_id}/step",
        "/reset",
        "/step",
        "/state",
        "/health",
        "/schema",
        "/metadata",
    }
    assert "RunCodeRequest" in spec["components"]["schemas"]
    assert "HTTPBearer" in spec["components"]["securitySchemes"]
    assert docs.status_code == 200


def test_settings_from_env() -> None:
    settings = ServerSettings.from_env(
        {"EXECGYM_SERVER_MAX_BODY_BYTES": "2MiB", "EXECGYM_SERVER_WARM_POOL": "no"}, workers=3
    )
    assert settings.max_body_bytes == 2 * 1024 * 1024
    assert settings.warm_pool is False
    assert settings.workers == 3
    with pytest.raises(ConfigError, match="unknown setting EXECGYM_SERVER_PORTT"):
        ServerSettings.from_env({"EXECGYM_SERVER_PORTT": "1"})
    with pytest.raises(ConfigError, match="workers must be positive"):
        ServerSettings(workers=0)


async def test_bc15_memory_is_its_own_status(
    bwrap_client: httpx.AsyncClient, needs_cgroup: None
) -> None:
    body = {
        "language": "python",
        "code": "x = bytearray(8 * 1024**3)\nprint(len(x))",
        "limits": {"memory_bytes": 512 * 1024 * 1024},
    }
    answer = (await bwrap_client.post("/v1/run", json=body)).json()
    assert answer["status"] == "memory_limit", answer
    assert answer["run"]["limit_hit"] == "memory_bytes"
    fine = {"language": "python", "code": "print(1)"}
    assert (await bwrap_client.post("/v1/run", json=fine)).json()["status"] == "ok"


@pytest.mark.parametrize(
    ("language", "flood"),
    [
        ("python", "while True: print('x' * 1000)"),
        ("cpp", '#include <cstdio>\nint main(){ for(;;) puts("xxxxxxxxxxxxxxxxxxxxxxxx"); }'),
    ],
)
async def test_bc19_output_flood_is_its_own_status(
    bwrap_client: httpx.AsyncClient, toolchains: Toolchains, language: str, flood: str
) -> None:
    need_language(toolchains, language)
    body = {"language": language, "code": flood, "limits": {"wall_time_s": 5}}
    answer = (await bwrap_client.post("/v1/run", json=body)).json()
    assert answer["status"] == "output_limit", answer
    assert answer["run"]["stdout_truncated"] is True
    assert len(answer["run"]["stdout"]) <= 1024 * 1024


async def test_validation_errors_name_the_field() -> None:
    async with serving(settings=ServerSettings(), sandbox=fake(), toolchains=NO_TOOLS) as client:
        negative = await client.post(
            "/run_code", json={"code": "", "language": "python", "run_timeout": -1}
        )
        assert negative.status_code == 422
        assert negative.json()["error"] == "invalid_request"
        assert "body.run_timeout: Input should be greater than 0" in negative.json()["message"]
        untyped = await client.post("/run_code", content=b'{"code": "", "language": "python"}')
        assert untyped.status_code == 422
        assert "Content-Type: application/json" in untyped.json()["message"]


async def test_surrogates_in_one_result_do_not_sink_the_batch(
    bwrap_client: httpx.AsyncClient,
) -> None:
    hostile = "    raise ValueError('\\udcff' + chr(0xD800))\n"
    body = {
        "tasks": [ONE_TASK],
        "rollouts": [
            {"task_id": "t/1", "completion": hostile},
            {"task_id": "t/1", "completion": "    return 1\n"},
        ],
    }
    response = await bwrap_client.post("/v1/score", json=body)
    assert response.status_code == 200, response.text
    first, second = response.json()["results"]
    assert first["verdict"] == "error"
    assert first["error"]["message"] == "\\udcff\\ud800"
    assert second["verdict"] == "passed"


async def test_file_names_escaping_the_work_dir_are_422(bwrap_client: httpx.AsyncClient) -> None:
    body = {"code": "", "language": "python", "files": {"../x": base64.b64encode(b"x").decode()}}
    response = await bwrap_client.post("/run_code", json=body)
    assert response.status_code == 422
    assert "must be relative" in response.json()["message"]
    assert (await bwrap_client.get("/metrics")).text.count("execgym_in_flight 0.0") == 1


FORGE_REPORT = """
import json, os
fake = {"steps": [], "files": {}}
try:
    with open(f"/proc/{os.getppid()}/fd/3", "w") as pipe:
        pipe.write(json.dumps(fake))
    print("forged")
except OSError as error:
    print("refused", type(error).__name__)
raise SystemExit(3)
"""


async def test_the_supervisor_report_cannot_be_forged(bwrap_client: httpx.AsyncClient) -> None:
    body = {"language": "python", "code": FORGE_REPORT, "fetch_files": ["x"]}
    answer = (await bwrap_client.post("/v1/run", json=body)).json()
    assert answer["run"]["stdout"] == "refused PermissionError\n"
    assert answer["status"] == "runtime_error"
    assert answer["run"]["exit_code"] == 3


async def test_killing_the_supervisor_is_never_a_pass(bwrap_client: httpx.AsyncClient) -> None:
    code = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
    body = {"language": "python", "code": code, "fetch_files": ["x"]}
    run_code = (await bwrap_client.post("/run_code", json=body)).json()
    assert run_code["status"] == "Failed", run_code
    assert run_code["run_result"]["return_code"] != 0


@pytest.mark.slow
async def test_humaneval_canonical_over_http(bwrap_client: httpx.AsyncClient) -> None:
    body = {"dataset": "humaneval", "solutions": "canonical"}
    response = await bwrap_client.post("/v1/score", json=body, timeout=600)
    assert response.status_code == 200, response.text
    job = response.json()
    assert job["state"] == "done"
    assert job["counts"] == {"passed": 164}
    assert len({result["task_id"] for result in job["results"]}) == 164


async def test_our_errors_map_by_kind() -> None:
    from execgym.errors import SandboxUnavailable

    class QueueFull(SandboxUnavailable):  # shaped like a broker's full-queue error
        retry_after_s = 2.5

    class Failing(FakeSandbox):
        error: Exception = SandboxUnavailable("bwrap vanished")

        async def run(self, request: RunRequest) -> RunResult:
            raise self.error

    sandbox = Failing([])
    body = {"code": "print(1)", "language": "bash"}
    tools = Toolchains({"bash": "/usr/bin/bash"})
    async with serving(settings=ServerSettings(), sandbox=sandbox, toolchains=tools) as client:
        ours = await client.post("/run_code", json=body)
        assert ours.status_code == 503
        assert ours.json()["message"] == "bwrap vanished"
        assert ours.json()["error_id"]
        sandbox.error = QueueFull("queue full")
        full = await client.post("/run_code", json=body)
        assert full.status_code == 429
        assert full.headers["retry-after"] == "3"
        sandbox.error = RuntimeError("a bug")
        bug = await client.post("/run_code", json=body)
        assert bug.status_code == 500
        assert "a bug" not in bug.text
