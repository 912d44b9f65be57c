"""The HTTP routes; each is a thin translation between the schemas and :class:`Service`."""

from __future__ import annotations

import hmac
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError

from execgym.limits import MiB
from execgym.sandbox.base import Status
from execgym.server.jobs import ResultStream
from execgym.server.languages import LANGUAGES, utf8
from execgym.server.programs import (
    LanguageUnavailable,
    ProgramRequest,
    check_path,
    decode_files,
    find_language,
)
from execgym.server.responses import job_response, run_code_response, run_response, utf8_safe
from execgym.server.run_code import differences, place_files, timeout_note
from execgym.server.schemas import (
    ErrorResponse,
    JobResponse,
    RunCodeRequest,
    RunCodeResponse,
    RunRequest,
    RunResponse,
    ScoreRequest,
)
from execgym.server.service import Service
from execgym.server.status import status_page

_bearer = HTTPBearer(auto_error=False, description="the token given to `execgym serve`")


def service_of(request: Request) -> Service:
    """The app's :class:`Service`."""
    return request.app.state.service  # type: ignore[no-any-return]


def require_token(
    request: Request,
    credentials: HTTPAuthorizationCredentials | None = Depends(_bearer),  # noqa: B008
) -> None:
    """Refuse the request (401) unless it carries the configured bearer token."""
    token = service_of(request).settings.token
    if token is None:
        return
    given = credentials.credentials if credentials is not None else ""
    if not hmac.compare_digest(given.encode(), token.encode()):
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "a valid bearer token is required: send 'Authorization: Bearer <token>'",
            headers={"WWW-Authenticate": "Bearer"},
        )


ERRORS = {
    401: {"model": ErrorResponse, "description": "missing or wrong bearer token"},
    413: {"model": ErrorResponse, "description": "request body too large"},
    422: {"model": ErrorResponse, "description": "invalid request"},
    429: {"model": ErrorResponse, "description": "at capacity; see Retry-After"},
}

health = APIRouter(tags=["health"])
api = APIRouter(dependencies=[Depends(require_token)], responses=ERRORS)  # type: ignore[arg-type]


@health.get("/healthz")
async def healthz() -> dict[str, str]:
    """Liveness: the process answers."""
    return {"status": "ok"}


@health.get("/readyz", responses={503: {"model": ErrorResponse}})
async def readyz(request: Request) -> JSONResponse:
    """Readiness: the sandbox runs a known-good program correctly."""
    why = await service_of(request).ready()
    if why is not None:
        return JSONResponse({"error": "not_ready", "message": why}, status_code=503)
    return JSONResponse({"status": "ready"})


@api.get("/metrics", tags=["health"], response_class=Response)
async def metrics(request: Request) -> Response:
    """Prometheus metrics."""
    registry = service_of(request).metrics.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


@health.get("/status", response_class=HTMLResponse, tags=["status"])
async def status_html() -> HTMLResponse:
    """The live status page (it holds no data: its script polls ``/v1/status``)."""
    return HTMLResponse(status_page())


@api.get("/v1/status", tags=["status"])
async def status_json(request: Request) -> dict[str, object]:
    """Throughput, verdict mix, active sandboxes, breakers and worker health."""
    board = service_of(request).status
    if board is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "this app keeps no status board")
    return await board.status()


@api.post("/v1/breakers/{task_type:path}/reset", tags=["status"])
async def reset_breaker(task_type: str, request: Request) -> dict[str, object]:
    """Close a task type's circuit breaker (an operator's reset, once the cause is fixed)."""
    board = service_of(request).status
    if board is not None and board.shared is not None:  # the broker's workers' breakers
        if not await board.shared.reset_breaker(task_type):
            raise HTTPException(
                status.HTTP_404_NOT_FOUND, f"no shared breaker for task type {task_type!r}"
            )
        return {"task_type": task_type, "state": "closed"}
    breakers = board.breakers if board is not None else None
    if breakers is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "circuit breakers are off here")
    if not breakers.reset(task_type):
        known = ", ".join(sorted(breakers.views())) or "none yet"
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, f"no breaker for task type {task_type!r}; known: {known}"
        )
    return {"task_type": task_type, "state": "closed"}


@api.get("/v1/ping", tags=["sandboxfusion"])
async def ping() -> str:
    """SandboxFusion's liveness check: answers ``"pong"``."""
    return "pong"


@api.post("/run_code", tags=["sandboxfusion"])
async def run_code(body: RunCodeRequest, request: Request) -> RunCodeResponse:
    """Run one program, SandboxFusion-style (what verl's ``call_sandbox_api`` sends).

    A known language whose toolchain is missing here is answered ``Failed`` with a
    ``language unavailable`` message and neither result, which verl scores as an API
    failure rather than as the code's compile or runtime error. Timeouts and memory
    above the server's maximum are lowered to it, and where execgym's sandbox differs
    from SandboxFusion's (see :mod:`execgym.server.run_code`) the ``message`` says so.
    """
    service = service_of(request)
    settings = service.settings
    pod = settings.pod_name
    notes = []
    run_timeout, compile_timeout = body.run_timeout, body.compile_timeout
    if run_timeout > settings.max_wall_time_s:
        notes.append(timeout_note("run_timeout", run_timeout, settings.max_wall_time_s))
        run_timeout = settings.max_wall_time_s
    if compile_timeout > settings.max_wall_time_s:
        notes.append(timeout_note("compile_timeout", compile_timeout, settings.max_wall_time_s))
        compile_timeout = settings.max_wall_time_s
    memory = body.memory_limit_MB * 1024 * 1024 if body.memory_limit_MB > 0 else None
    if memory is not None and memory > settings.max_memory_bytes:
        notes.append(
            f"memory_limit_MB {body.memory_limit_MB} is more than this server allows; the "
            f"program ran with {settings.max_memory_bytes // MiB} MiB"
        )
        memory = settings.max_memory_bytes
    network = body.network or settings.run_code_network
    limits = service.limits(wall_time_s=run_timeout, memory_bytes=memory, network=network)
    work_files, tmp_files = place_files(decode_files(body.files))
    try:
        program = ProgramRequest(
            language=body.language,
            code=body.code,
            stdin=utf8(body.stdin or ""),
            files=work_files,
            tmp_files=tmp_files,
            fetch_files=[check_path(path, "fetch_files") for path in body.fetch_files],
            compile_timeout_s=compile_timeout,
            limits=limits,
        )
        outcome = await service.run(program)
    except LanguageUnavailable as error:
        return RunCodeResponse(status="Failed", message=str(error), executor_pod_name=pod)
    response = run_code_response(outcome, pod)
    notes += differences(outcome, network, body.fetch_files)
    if notes:
        response.message = "; ".join([response.message, *notes] if response.message else notes)
    return response


@api.post("/v1/run", tags=["run"], responses={501: {"model": ErrorResponse}})
async def run(body: RunRequest, request: Request) -> RunResponse:
    """Run one program and return its output and resource usage, per step."""
    service = service_of(request)
    overrides = body.limits.model_dump(exclude_none=True) if body.limits else {}
    limits = service.limits(**overrides)
    if body.compile_timeout_s > service.settings.max_wall_time_s:
        service.limits(wall_time_s=body.compile_timeout_s)
    try:
        find_language(body.language, service.toolchains)
    except LanguageUnavailable as error:
        raise HTTPException(status.HTTP_501_NOT_IMPLEMENTED, str(error)) from error
    program = ProgramRequest(
        language=body.language,
        code=body.code,
        stdin=utf8(body.stdin),
        files=decode_files(body.files),
        fetch_files=[check_path(path, "fetch_files") for path in body.fetch_files],
        compile_timeout_s=body.compile_timeout_s,
        limits=limits,
    )
    outcome = await service.run(program)
    if outcome.sandbox.status is Status.SANDBOX_ERROR:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, outcome.sandbox.message)
    return run_response(body.language, outcome)


@api.get("/v1/languages", tags=["run"])
async def languages(request: Request) -> dict[str, str]:
    """Each language and whether it runs here (``available`` or what is missing)."""
    toolchains = service_of(request).toolchains
    return {
        name: "available"
        if not toolchains.missing(lang)
        else "missing " + ", ".join(toolchains.missing(lang))
        for name, lang in LANGUAGES.items()
    }


async def score_request(request: Request) -> ScoreRequest:
    """The request's body as a :class:`ScoreRequest`, read here rather than by FastAPI.

    Starlette would keep the body (its bytes and its parsed JSON) on the request for the
    whole response, a streamed one included; read here, nothing of it outlives the batch.

    Raises:
        RequestValidationError: if the body is not JSON or not a valid request (422).
    """
    raw = b"".join([chunk async for chunk in request.stream()])
    try:
        data = json.loads(raw)
    except ValueError as error:
        problem = {"type": "json_invalid", "loc": ("body", 0), "msg": f"JSON decode error: {error}"}
        raise RequestValidationError([problem]) from None
    del raw
    try:
        return ScoreRequest.model_validate(data)
    except ValidationError as error:
        problems = [{**item, "loc": ("body", *item["loc"])} for item in error.errors()]
        raise RequestValidationError(problems) from None


NDJSON = "application/x-ndjson"


def _inlined(model: type[ScoreRequest]) -> dict[str, Any]:
    """``model``'s JSON schema with its ``$defs`` in place (for the OpenAPI spec)."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(value: Any) -> Any:
        if isinstance(value, dict):
            ref = value.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return inline(defs[ref.removeprefix("#/$defs/")])
            return {key: inline(item) for key, item in value.items()}
        if isinstance(value, list):
            return [inline(item) for item in value]
        return value

    inlined: dict[str, Any] = inline(schema)
    return inlined


@api.post(
    "/v1/score",
    tags=["score"],
    status_code=200,
    response_model=JobResponse,
    responses={202: {"model": JobResponse}, 200: {"content": {NDJSON: {}}}},
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": _inlined(ScoreRequest)}},
        }
    },
)
async def score(request: Request) -> Response:
    """Score a batch of rollouts; with ``wait: false``, answer 202 and a job id at once.

    With ``stream: true``, answer NDJSON (``application/x-ndjson``): one results line
    per rollout as it finishes (input order, or completion order with ``order:
    "completion"``), then ``{"summary": {...}}``. A client that leaves cancels the job.
    """
    body = await score_request(request)
    service = service_of(request)
    batch = service.batch(body)
    body.tasks = body.rollouts = None  # the batch has them: not held twice while it runs
    if body.stream:
        results = await service.jobs.stream(batch, ordered=body.order == "input")
        del batch
        return StreamingResponse(_ndjson(results), media_type=NDJSON)
    job_id = await service.jobs.submit(batch)
    del batch
    headers = {}
    if not body.wait:
        view = await service.jobs.get(job_id)
        headers["Location"] = f"/v1/jobs/{job_id}"
    else:
        view = await service.jobs.wait(job_id)
    if view is None:  # expired already: only with a TTL shorter than the job
        raise HTTPException(status.HTTP_410_GONE, f"job {job_id} expired")
    code = status.HTTP_200_OK if body.wait else status.HTTP_202_ACCEPTED
    return Response(job_response(view), code, headers, media_type="application/json")


async def _ndjson(results: ResultStream) -> AsyncIterator[bytes]:
    """Each results line as it may be sent, then the summary line; cancels if cut short."""
    try:
        async for held in results:
            yield held.line + b"\n"
            del held  # written: not held here
        summary = {"summary": utf8_safe(results.summary())}
        yield json.dumps(summary, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
    finally:
        await results.aclose()


@api.get(
    "/v1/jobs/{job_id}",
    tags=["score"],
    response_model=JobResponse,
    responses={404: {"model": ErrorResponse}},
)
async def job(job_id: str, request: Request) -> Response:
    """A job's state and its results so far."""
    view = await service_of(request).jobs.get(job_id)
    if view is None:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, f"no job {job_id!r}: unknown, or expired after its TTL"
        )
    return Response(job_response(view), media_type="application/json")
