"""deploy/: nothing behind the gateway is open. Redis takes only its ACL users, each pod holds
only its own credentials (from the Secret switchyard-internal, never committed), and
NetworkPolicies let only the pods that need them reach Redis and Triton's inference ports."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from config.internal_secrets import REDIS_ACL_FILE, TRITON_KEY_FILE, redis_password_file
from config.settings import SwitchyardConfig

from .test_manifests import DEPLOY, OVERLAYS, Manifest, _config_map, _one, _pod, render

SECRET = "switchyard-internal"
# What each workload may hold of the Secret: its own Redis user's password, and the inference
# key where Triton is started (triton) or called (gateway).
HOLDS = {
    "gateway": {redis_password_file("gateway"), TRITON_KEY_FILE},
    "dispatcher": {redis_password_file("dispatcher")},
    "autoscaler": {redis_password_file("fleet")},
    "triton": {redis_password_file("fleet"), TRITON_KEY_FILE},
    "redis": {REDIS_ACL_FILE, redis_password_file("admin")},  # the admin password for its probe
}
WORKLOAD_KINDS = ("Deployment", "StatefulSet")


@pytest.fixture(scope="module", params=OVERLAYS)
def manifests(request: pytest.FixtureRequest) -> list[Manifest]:
    return render(DEPLOY / "overlays" / request.param)


def _workloads(manifests: list[Manifest]) -> dict[str, Manifest]:
    found = [m for m in manifests if m["kind"] in WORKLOAD_KINDS]
    return {m["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"]: m for m in found}


def _secret_items(workload: Manifest) -> set[str]:
    items: set[str] = set()
    for volume in _pod(workload).get("volumes", []):
        if "secret" in volume and volume["secret"]["secretName"] == SECRET:
            assert volume["secret"].get("items"), "mount named items only, never the whole Secret"
            items |= {item["key"] for item in volume["secret"]["items"]}
    return items


def _mount_path(workload: Manifest, volume_name: str) -> str:
    (container,) = _pod(workload)["containers"]
    (path,) = [m["mountPath"] for m in container["volumeMounts"] if m["name"] == volume_name]
    return str(path)


def test_each_workload_holds_only_its_own_credentials(manifests: list[Manifest]) -> None:
    workloads = _workloads(manifests)
    assert set(HOLDS) <= set(workloads)
    for name, workload in workloads.items():
        assert _secret_items(workload) == HOLDS.get(name, set()), name


def test_components_read_their_secrets_where_the_config_says(manifests: list[Manifest]) -> None:
    raw = yaml.safe_load(_config_map(manifests)["data"]["switchyard.yaml"])
    config = SwitchyardConfig(**raw)
    for name, workload in _workloads(manifests).items():
        if name != "redis" and HOLDS.get(name):
            assert _mount_path(workload, "secrets") == config.secrets_dir, name
    assert config.redis.auth


def test_redis_loads_the_acl_file_it_mounts(manifests: list[Manifest]) -> None:
    redis = _workloads(manifests)["redis"]
    (container,) = _pod(redis)["containers"]
    args: list[str] = container["args"]
    acl = args[args.index("--aclfile") + 1]
    assert acl == f"{_mount_path(redis, 'secrets')}/{REDIS_ACL_FILE}"
    assert "--protected-mode" not in args


def test_no_secret_is_committed() -> None:
    for path in DEPLOY.rglob("*.yaml"):
        assert "kind: Secret" not in path.read_text(), path


def _sources(policy: Manifest, port: str) -> list[set[str] | None]:
    """Per ingress rule that opens `port`: the app names it admits (None: anyone)."""
    sources: list[set[str] | None] = []
    for rule in policy["spec"]["ingress"]:
        if not any(p["port"] == port for p in rule.get("ports", [])):
            continue
        if "from" not in rule:
            sources.append(None)
            continue
        for peer in rule["from"]:
            assert set(peer) == {"podSelector"}, "peers are pods of this namespace"
            selector: dict[str, Any] = peer["podSelector"]
            names = {selector["matchLabels"]["app.kubernetes.io/name"]} if "matchLabels" in selector else set()
            for expression in selector.get("matchExpressions", []):
                assert expression["key"] == "app.kubernetes.io/name" and expression["operator"] == "In"
                names |= set(expression["values"])
            sources.append(names)
    return sources


def _ports(workload: Manifest) -> set[str]:
    return {p["name"] for c in _pod(workload)["containers"] for p in c.get("ports", [])}


def test_only_the_components_that_use_redis_reach_it(manifests: list[Manifest]) -> None:
    policy = _one(manifests, "NetworkPolicy", "redis")
    assert policy["spec"]["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "redis"}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert _sources(policy, "redis") == [{"gateway", "dispatcher", "triton", "autoscaler"}]
    assert "redis" in _ports(_workloads(manifests)["redis"])


def test_only_gateways_reach_tritons_inference_ports(manifests: list[Manifest]) -> None:
    policy = _one(manifests, "NetworkPolicy", "triton")
    triton = _workloads(manifests)["triton"]
    selected = policy["spec"]["podSelector"]["matchLabels"].items()
    assert selected <= triton["spec"]["template"]["metadata"]["labels"].items()
    for port in ("grpc", "http"):
        assert _sources(policy, port) == [{"gateway"}], port
    assert _sources(policy, "metrics") == [None]  # Prometheus scrapes it
    assert {"grpc", "http", "metrics"} <= _ports(triton)


def test_every_policy_admits_pods_that_exist(manifests: list[Manifest]) -> None:
    apps = set(_workloads(manifests))
    for policy in (m for m in manifests if m["kind"] == "NetworkPolicy"):
        for port in {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}:
            for names in _sources(policy, port):
                assert names is None or names <= apps, (policy["metadata"]["name"], names - apps if names else None)


def test_the_configmap_names_no_credential(manifests: list[Manifest]) -> None:
    text = _config_map(manifests)["data"]["switchyard.yaml"]
    assert "password" not in text
