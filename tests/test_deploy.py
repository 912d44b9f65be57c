"""The example Kubernetes manifests in deploy/kubernetes/: schema-valid, and consistent
with the code (stream and group names, Redis address, drain within the grace period)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from execgym.broker.keys import GROUP, Keys

DEPLOY = Path(__file__).parent.parent / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.30"


def documents() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        found.extend((path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc)
    return found


def by_kind(kind: str) -> dict[str, Any]:
    (doc,) = [doc for _, doc in documents() if doc["kind"] == kind]
    return doc


CORE = [(name, doc) for name, doc in documents() if not doc["apiVersion"].startswith("keda.sh")]


@pytest.mark.parametrize(("name", "doc"), CORE, ids=[f"{n}:{d['kind']}" for n, d in CORE])
def test_manifest_is_valid_against_the_kubernetes_schema(name: str, doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_validator_catches_a_misspelt_field() -> None:
    broken = by_kind("Deployment")
    broken["spec"]["template"]["spec"]["containers"][0]["resource"] = {}  # not "resources"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def _arg(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_worker_deployment_matches_the_worker_cli() -> None:
    spec = by_kind("Deployment")["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    args = container["args"]
    assert args[0] == "worker"
    env = {e["name"]: e["value"] for e in container["env"]}
    assert _arg(args, "--broker") == "$(EXECGYM_BROKER)"
    service = by_kind("Service")["metadata"]["name"]
    assert env["EXECGYM_BROKER"] == f"redis://{service}:6379/0"
    assert int(_arg(args, "--concurrency")) <= int(container["resources"]["requests"]["cpu"])
    assert spec["terminationGracePeriodSeconds"] > float(_arg(args, "--drain-timeout"))


def keda_redis_streams_metric(meta: dict[str, str]) -> tuple[str, int]:
    """What KEDA's redis-streams scaler scales on for a trigger's ``metadata``.

    Mirrors ``redisStreamsMetadata.Validate`` and ``createEntriesCountFn`` in
    ``pkg/scalers/redis_streams_scaler.go`` of kedacore/keda at commit
    8b4f083ca8c8c2baf8477e322bd4d16ac4dfa09a (v2.20.1-117): with a ``consumerGroup``,
    ``streamLength`` is zeroed and the metric is the group's ``lag`` (XINFO GROUPS) when
    ``lagCount`` is set, else its pending entries (XPENDING, target
    ``pendingEntriesCount``, default 5); without one, the stream's length (XLEN, target
    ``streamLength``, default 5). Returns ``(metric, target per replica)``.
    """
    if meta.get("consumerGroup"):
        if int(meta.get("lagCount", "0")) != 0:
            return "lag", int(meta["lagCount"])
        return "xpending", int(meta.get("pendingEntriesCount", "5"))
    return "xlen", int(meta.get("streamLength", "5"))


def test_keda_rule_as_its_source_states_it() -> None:
    """The configuration issue 16 found: consumerGroup + streamLength scales on XPENDING."""
    found = {"consumerGroup": GROUP, "streamLength": "8"}
    assert keda_redis_streams_metric(found) == ("xpending", 5)
    assert keda_redis_streams_metric({"streamLength": "8"}) == ("xlen", 8)
    assert keda_redis_streams_metric({"consumerGroup": GROUP, "lagCount": "4"}) == ("lag", 4)


def test_keda_scales_the_workers_on_the_backlog() -> None:
    scaled = by_kind("ScaledObject")
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    assert scaled["spec"]["scaleTargetRef"]["name"] == by_kind("Deployment")["metadata"]["name"]
    assert 1 <= scaled["spec"]["minReplicaCount"] <= scaled["spec"]["maxReplicaCount"]
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "redis-streams"
    meta = trigger["metadata"]
    assert meta["stream"] == Keys().jobs
    assert meta["consumerGroup"] == GROUP
    assert meta["address"] == f"{by_kind('Service')['metadata']['name']}:6379"
    metric, target = keda_redis_streams_metric(meta)
    assert metric == "lag", "scale on the jobs no worker has taken yet (XINFO GROUPS lag)"
    assert target > 0
    assert "streamLength" not in meta  # ignored beside consumerGroup: it misleads
    assert "pendingEntriesCount" not in meta
    assert all(isinstance(value, str) for value in meta.values())  # KEDA wants strings
    images = [
        container["image"]
        for _, doc in CORE
        if doc["kind"] in ("Deployment", "StatefulSet")
        for container in doc["spec"]["template"]["spec"]["containers"]
    ]
    (image,) = [image for image in images if image.startswith("redis:")]
    assert int(image.split(":")[1].split(".")[0]) >= 7, "lag needs Redis 7+"


async def test_lag_is_the_backlog_on_a_real_broker(tmp_path: Path) -> None:
    """On a real redis-server and execgym's broker: 10 jobs queued, a worker with
    concurrency 2 holding 2 of them and done with 1 more. XPENDING (what the old
    configuration scaled on) reads 2 however long the queue; the lag reads the 7 waiting.
    """
    import shutil

    from execgym.broker.redis_streams import RedisStreamsBroker
    from execgym.testing import RedisServer
    from tests.broker.conftest import FAST, job
    from tests.conftest import require

    require(shutil.which("redis-server") is not None, "redis-server (apt-get install redis-server)")
    server = RedisServer(tmp_path)
    server.start()
    broker = RedisStreamsBroker(server.url, FAST, block_s=0.2)
    try:
        await broker.submit([job(index) for index in range(10)])
        (done,) = await broker.consume("worker-a", 1, 0)
        await broker.ack(done)  # XACK + XDEL, as after a stored result
        held = await broker.consume("worker-a", 2, 0)
        assert len(held) == 2
        redis = broker.redis
        (group,) = await redis.xinfo_groups(Keys().jobs)
        assert group["name"] == GROUP
        pending = (await redis.xpending(Keys().jobs, GROUP))["pending"]
        assert (group["lag"], pending) == (7, 2)
        values = {"lag": group["lag"], "xpending": pending, "xlen": await redis.xlen(Keys().jobs)}
        metric, target = keda_redis_streams_metric(
            by_kind("ScaledObject")["spec"]["triggers"][0]["metadata"]
        )
        assert values[metric] == 7
        assert -(-values[metric] // target) > 1  # KEDA's AverageValue: more than one replica
    finally:
        await broker.aclose()
        server.kill()
