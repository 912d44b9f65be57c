"""The HTTP API's results carry a task's diagnostics (/v1/score, in-process app)."""

from __future__ import annotations

import httpx

from tests.diagnostics.test_scoring_diagnostics import CLEAN, LEAKY, TASK


async def test_score_returns_diagnostics(bwrap_client: httpx.AsyncClient) -> None:
    body = {
        "tasks": [TASK],
        "rollouts": [
            {"task_id": "leaky", "completion": LEAKY},
            {"task_id": "leaky", "completion": CLEAN},
        ],
    }
    response = await bwrap_client.post("/v1/score", json=body)
    assert response.status_code == 200, response.text
    leaky, clean = response.json()["results"]
    assert [leak["kind"] for leak in leaky["diagnostics"]["leaks"]["found"]] == ["memory"]
    assert leaky["diagnostics"]["leaks"]["found"][0]["where"]["code"] == "_seen.append([x] * 10)"
    assert clean["diagnostics"]["leaks"]["found"] == []
