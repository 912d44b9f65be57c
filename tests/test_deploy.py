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


def test_keda_scaler_watches_the_jobs_stream_of_the_worker_group() -> None:
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
    assert int(meta["streamLength"]) > 0
    assert all(isinstance(value, str) for value in meta.values())  # KEDA wants strings
