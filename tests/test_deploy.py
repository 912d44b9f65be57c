"""The example Kubernetes manifests in deploy/kubernetes/: schema-valid, and consistent
with the code (stream and group names, Redis address, drain within the grace period).

Core kinds are checked by kubernetes_validate (its bundled Kubernetes schemas); the KubeRay
RayCluster, which it has no schema for, against KubeRay's own CRD schema, vendored in
tests/data/kuberay/ (SOURCE.md names the upstream file and commit).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from execgym.broker.keys import GROUP, Keys

DEPLOY = Path(__file__).parent.parent / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.30"
RAYCLUSTER_SCHEMA = Path(__file__).parent / "data" / "kuberay" / "raycluster-v1.schema.json"


def documents() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        found.extend((path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc)
    return found


def by_kind(kind: str) -> dict[str, Any]:
    (doc,) = [doc for _, doc in documents() if doc["kind"] == kind]
    return doc


CUSTOM_GROUPS = ("keda.sh/", "ray.io/")  # CRDs: kubernetes_validate has no schema for them
CORE = [(name, doc) for name, doc in documents() if not doc["apiVersion"].startswith(CUSTOM_GROUPS)]
RAY = [(name, doc) for name, doc in documents() if doc["apiVersion"].startswith("ray.io/")]


@pytest.mark.parametrize(("name", "doc"), CORE, ids=[f"{n}:{d['kind']}" for n, d in CORE])
def test_manifest_is_valid_against_the_kubernetes_schema(name: str, doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_validator_catches_a_misspelt_field() -> None:
    broken = by_kind("Deployment")
    broken["spec"]["template"]["spec"]["containers"][0]["resource"] = {}  # not "resources"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def _strict(schema: Any) -> Any:
    """``schema`` (an OpenAPI v3 schema of a CRD version) as the API server applies it
    with strict field validation (``kubectl apply``'s default since Kubernetes 1.27): an
    object schema with ``properties`` and no ``additionalProperties`` rejects any other
    field unless it carries ``x-kubernetes-preserve-unknown-fields`` (plain JSON Schema
    would accept it, where the API server errors with ``unknown field``)."""
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    strict = {key: _strict(value) for key, value in schema.items()}
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        strict["additionalProperties"] = False
    return strict


def _list_type(
    validator: Any, list_type: str, instance: Any, schema: dict[str, Any]
) -> Iterator[jsonschema.ValidationError]:
    """``x-kubernetes-list-type`` as the API server checks it: a ``set`` holds no value
    twice, a ``map`` no two items with the same ``x-kubernetes-list-map-keys``."""
    if not validator.is_type(instance, "array"):
        return
    keys = schema.get("x-kubernetes-list-map-keys", [])
    seen: list[Any] = []
    for item in instance:
        key = item if list_type == "set" else [item.get(k) for k in keys]
        if list_type in ("set", "map") and key in seen:
            yield jsonschema.ValidationError(f"duplicate entry {key!r} in a list-type={list_type}")
        seen.append(key)


@cache
def raycluster_validator() -> Any:
    """A JSON Schema validator of ``ray.io/v1`` RayCluster: KubeRay's CRD schema, strict."""
    schema = _strict(json.loads(RAYCLUSTER_SCHEMA.read_text()))
    base = jsonschema.Draft4Validator  # OpenAPI 3.0's schema objects are draft 4/5 JSON Schema
    kind = jsonschema.validators.extend(base, {"x-kubernetes-list-type": _list_type})
    return kind(schema)


def validate_raycluster(doc: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` or ``kubernetes_validate.ValidationError``
    when ``doc`` is not a RayCluster the API server with KubeRay's CRD would accept: its
    body against the CRD schema, its ``metadata`` (``type: object`` in a CRD, checked by
    the server as ObjectMeta) through kubernetes_validate's ObjectMeta."""
    assert (doc["apiVersion"], doc["kind"]) == ("ray.io/v1", "RayCluster")
    raycluster_validator().validate(doc)
    holder = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": doc["metadata"]}
    kubernetes_validate.validate(holder, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize(("name", "doc"), RAY, ids=[f"{n}:{d['kind']}" for n, d in RAY])
def test_raycluster_is_valid_against_kuberays_crd_schema(name: str, doc: dict[str, Any]) -> None:
    validate_raycluster(doc)


def test_the_raycluster_validator_catches_misspelt_fields() -> None:
    """In KubeRay's own fields, in the pod template the CRD embeds, in metadata, a
    duplicate in a list-type=map, and a wrong type each fail."""
    ((_, good),) = RAY
    validate_raycluster(good)

    def broken(change: Any) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(json.dumps(good))
        change(doc)
        return doc

    def worker(doc: dict[str, Any]) -> dict[str, Any]:
        found: dict[str, Any] = doc["spec"]["workerGroupSpecs"][0]
        return found

    def head_container(doc: dict[str, Any]) -> dict[str, Any]:
        found: dict[str, Any] = doc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
        return found

    group = ["spec", "workerGroupSpecs", 0]
    head = ["spec", "headGroupSpec", "template", "spec", "containers", 0]
    env = [*group, "template", "spec", "containers", 0, "env"]
    cases = [  # (change, where the error is, what it says)
        (lambda d: worker(d).update(maxReplica=8), group, "'maxReplica' was unexpected"),
        (lambda d: head_container(d).update(resource={}), head, "'resource' was unexpected"),
        (lambda d: worker(d).update(replicas="two"), [*group, "replicas"], "not of type"),
        (
            lambda d: worker(d)["template"]["spec"]["containers"][0]["env"].append(
                {"name": "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "value": "1"}
            ),
            env,
            "duplicate entry ['RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO']",
        ),
    ]
    for change, path, message in cases:
        with pytest.raises(jsonschema.ValidationError) as caught:
            raycluster_validator().validate(broken(change))
        assert (list(caught.value.absolute_path), message in caught.value.message) == (path, True)
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_raycluster(broken(lambda d: d["metadata"].update(labelz={})))


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
