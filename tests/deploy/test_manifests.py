"""The Kubernetes manifests in deploy/: rendered, validated against Kubernetes' schemas offline,
and checked for what the platform relies on (GPUs, probes, drains, disruption budgets).

Rendering does what kustomize does for these files and no more: resources (files and
folders), `namespace`, `images` and inline JSON 6902 patches. Where `kubectl` is installed the
result is compared with `kubectl kustomize`, so the stand-in cannot drift from the real thing.

Schemas come from the `kubernetes-validate` package, which bundles Kubernetes' OpenAPI
schemas (no network). It has none for CRDs: the Prometheus Operator's ServiceMonitor and
PodMonitor are checked by hand instead (their selectors and ports match real objects).
"""

from __future__ import annotations

import copy
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from config.settings import SwitchyardConfig, load_config

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
OVERLAYS = ("small", "large")
KUBERNETES_VERSION = "1.30.0"  # the oldest release the manifests support
CRD_GROUPS = ("monitoring.coreos.com/",)
CLUSTER_SCOPED = {"Namespace"}

Manifest = dict[str, Any]


# ---- rendering --------------------------------------------------------------------------------


def render(folder: Path) -> list[Manifest]:
    """The manifests `kubectl kustomize folder` would print (for the features deploy/ uses)."""
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    unknown = set(kustomization) - {"apiVersion", "kind", "namespace", "resources", "images", "patches"}
    assert not unknown, f"{folder}: the test's renderer does not handle {sorted(unknown)}"
    manifests: list[Manifest] = []
    for resource in kustomization.get("resources", []):
        path = folder / resource
        if path.is_dir():
            manifests += render(path)
        else:
            manifests += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    for manifest in manifests:
        if "namespace" in kustomization and manifest["kind"] not in CLUSTER_SCOPED:
            manifest["metadata"]["namespace"] = kustomization["namespace"]
        for image in kustomization.get("images", []):
            _set_image(manifest, image)
    for patch in kustomization.get("patches", []):
        targets = [m for m in manifests if _matches(m, patch["target"])]
        assert len(targets) == 1, f"{folder}: patch target {patch['target']} matches {len(targets)} manifests"
        for operation in yaml.safe_load(patch["patch"]):
            _apply(targets[0], operation)
    return manifests


def _matches(manifest: Manifest, target: dict[str, str]) -> bool:
    group, _, version = manifest["apiVersion"].rpartition("/")
    wanted = {"group": group, "version": version, "kind": manifest["kind"], "name": manifest["metadata"]["name"]}
    return all(wanted[key] == value for key, value in target.items())


def _set_image(manifest: Manifest, image: dict[str, str]) -> None:
    pod = manifest.get("spec", {}).get("template", {}).get("spec", {})
    for container in pod.get("containers", []) + pod.get("initContainers", []):
        if container["image"] == image["name"]:
            container["image"] = f"{image.get('newName', image['name'])}:{image['newTag']}"


def _apply(document: Manifest, operation: dict[str, Any]) -> None:
    """One JSON 6902 `add` or `replace` (all deploy/ uses)."""
    *parents, last = [part.replace("~1", "/").replace("~0", "~") for part in operation["path"].split("/")[1:]]
    node: Any = document
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    key: Any = int(last) if isinstance(node, list) else last
    if operation["op"] == "replace":
        assert key in node if isinstance(node, dict) else key < len(node), f"replace of a missing {operation['path']}"
        node[key] = operation["value"]
    elif operation["op"] == "add" and isinstance(node, dict):
        node[key] = operation["value"]
    else:
        raise AssertionError(f"the test's renderer does not handle {operation}")


@pytest.fixture(scope="module", params=OVERLAYS)
def overlay(request: pytest.FixtureRequest) -> tuple[str, list[Manifest]]:
    pool: str = request.param
    return pool, render(DEPLOY / "overlays" / pool)


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> SwitchyardConfig:
    """The switchyard.yaml in the ConfigMap, loaded (and so validated) as every pod loads it."""
    path = tmp_path_factory.mktemp("config") / "switchyard.yaml"
    path.write_text(_config_map(render(DEPLOY / "base"))["data"]["switchyard.yaml"])
    return load_config(path)


def _one(manifests: list[Manifest], kind: str, name: str) -> Manifest:
    found = [m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name]
    assert len(found) == 1, f"{len(found)} {kind}/{name}"
    return found[0]


def _config_map(manifests: list[Manifest]) -> Manifest:
    return _one(manifests, "ConfigMap", "switchyard-config")


def _pod(workload: Manifest) -> dict[str, Any]:
    pod: dict[str, Any] = workload["spec"]["template"]["spec"]
    return pod


# ---- schemas ----------------------------------------------------------------------------------


@pytest.mark.parametrize("folder", ["base", *(f"overlays/{pool}" for pool in OVERLAYS)])
def test_every_manifest_matches_the_kubernetes_schemas(folder: str) -> None:
    manifests = render(DEPLOY / folder)
    crds = [m for m in manifests if m["apiVersion"].startswith(CRD_GROUPS)]
    assert {m["kind"] for m in crds} == {"ServiceMonitor", "PodMonitor"}
    for manifest in manifests:
        if manifest in crds:
            with pytest.raises(kubernetes_validate.SchemaNotFoundError):  # checked by hand below
                kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
            continue
        kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)


def test_the_schema_check_rejects_a_misspelt_field() -> None:
    gateway = copy.deepcopy(_one(render(DEPLOY / "base"), "Deployment", "gateway"))
    _pod(gateway)["containers"][0]["readinesProbe"] = _pod(gateway)["containers"][0].pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(gateway, KUBERNETES_VERSION, strict=True)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_rendering_matches_kubectl_kustomize(overlay: tuple[str, list[Manifest]]) -> None:
    pool, manifests = overlay
    command = ["kubectl", "kustomize", str(DEPLOY / "overlays" / pool)]
    out = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True).stdout
    key: Callable[[Manifest], tuple[str, str]] = lambda m: (m["kind"], m["metadata"]["name"])  # noqa: E731
    assert sorted(manifests, key=key) == sorted(yaml.safe_load_all(out), key=key)


# ---- what the platform relies on ---------------------------------------------------------------


def test_the_configmap_holds_a_valid_switchyard_yaml(config: SwitchyardConfig) -> None:
    assert set(config.pools) == set(OVERLAYS)
    assert config.redis.host == "redis.switchyard.svc.cluster.local"
    assert config.gateway.host == "0.0.0.0"


def test_the_pool_deployment_runs_one_copy_per_pod_on_its_gpus(
    overlay: tuple[str, list[Manifest]], config: SwitchyardConfig
) -> None:
    pool_id, manifests = overlay
    pool = config.pools[pool_id]
    triton = _one(manifests, "Deployment", f"triton-{pool_id}")
    assert triton["spec"]["replicas"] == pool.target_copies
    container = _pod(triton)["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == config.models[pool.model_id].gpus_per_copy
    assert container["args"][:4] == ["--pool", pool_id, "--server-id", "$(POD_NAME)"]
    assert not container["image"].endswith(":latest")
    assert triton["spec"]["selector"]["matchLabels"]["switchyard.io/pool"] == pool_id
    assert not [m for m in manifests if m["kind"] == "Deployment" and m["metadata"]["name"] == "triton"]


def test_weights_are_copied_to_local_disk_once(overlay: tuple[str, list[Manifest]], config: SwitchyardConfig) -> None:
    pool_id, manifests = overlay
    pod = _pod(_one(manifests, "Deployment", f"triton-{pool_id}"))
    (init,) = pod["initContainers"]
    env = {item["name"]: item["value"] for item in init["env"]}
    assert env["MODEL_ID"] == config.pools[pool_id].model_id
    assert env["WEIGHTS_SOURCE_URI"].endswith(f"/{config.pools[pool_id].model_id}")
    assert '[ -f "${dest}/.complete" ]' in init["args"][0]  # skipped when present
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert "hostPath" in volumes["models"]
    mounts = {mount["name"]: mount["mountPath"] for mount in pod["containers"][0]["volumeMounts"]}
    assert Path(config.models[env["MODEL_ID"]].weights_uri).parent == Path(mounts["models"])


def test_triton_drains_before_it_stops(overlay: tuple[str, list[Manifest]], config: SwitchyardConfig) -> None:
    pool_id, manifests = overlay
    pod = _pod(_one(manifests, "Deployment", f"triton-{pool_id}"))
    container = pod["containers"][0]
    pre_stop = "\n".join(container["lifecycle"]["preStop"]["exec"]["command"])
    assert "/admin/servers/{os.environ['POD_NAME']}/drain" in pre_stop
    compile(container["lifecycle"]["preStop"]["exec"]["command"][2], "preStop", "exec")
    assert pod["terminationGracePeriodSeconds"] > config.fleet.drain_timeout_s
    env = {item["name"] for item in container["env"]}
    assert {"POD_NAME", "SWITCHYARD_ADMIN_KEY", "SWITCHYARD_GATEWAY_URL"} <= env


def test_triton_readiness_runs_the_heartbeat_script(overlay: tuple[str, list[Manifest]]) -> None:
    pool_id, manifests = overlay
    container = _pod(_one(manifests, "Deployment", f"triton-{pool_id}"))["containers"][0]
    command = container["readinessProbe"]["exec"]["command"]
    assert command[1] == "/etc/switchyard/triton_ready.py"
    ports = {port["name"]: str(port["containerPort"]) for port in container["ports"]}
    assert command[2:] == [ports["http"], ports["metrics"]]
    args = container["args"]
    assert args[args.index("--ports") + 1] == f"{ports['http']},{ports['grpc']},{ports['metrics']}"
    assert args[args.index("--register-host") + 1] == "$(POD_IP)"  # no supervisor in a pod: it registers itself
    assert container["readinessProbe"]["timeoutSeconds"] >= 2  # the script sleeps 0.6 s between reads


def test_gateway_and_dispatcher_probes_and_secret() -> None:
    manifests = render(DEPLOY / "base")
    gateway = _one(manifests, "Deployment", "gateway")
    assert gateway["spec"]["replicas"] >= 2
    container = _pod(gateway)["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    for name in ("gateway", "dispatcher", "triton"):
        env = {e["name"]: e for e in _pod(_one(manifests, "Deployment", name))["containers"][0]["env"]}
        secret = env["SWITCHYARD_ADMIN_KEY"]["valueFrom"]["secretKeyRef"]
        assert secret == {"name": "switchyard-admin", "key": "admin-key"}
    redis = _one(manifests, "StatefulSet", "redis")
    assert "--appendonly" in _pod(redis)["containers"][0]["args"]
    assert redis["spec"]["volumeClaimTemplates"]


def test_every_replicated_workload_has_a_disruption_budget(overlay: tuple[str, list[Manifest]]) -> None:
    _, manifests = overlay
    budgets = [m["spec"]["selector"]["matchLabels"] for m in manifests if m["kind"] == "PodDisruptionBudget"]
    for workload in manifests:
        if workload["kind"] == "Deployment":
            labels = workload["spec"]["template"]["metadata"]["labels"]
            covering = [b for b in budgets if b.items() <= labels.items()]
            assert len(covering) == 1, f"{workload['metadata']['name']}: {len(covering)} budgets"


def test_monitors_scrape_named_ports_that_exist(overlay: tuple[str, list[Manifest]]) -> None:
    _, manifests = overlay
    monitor = _one(manifests, "ServiceMonitor", "switchyard")
    (expression,) = monitor["spec"]["selector"]["matchExpressions"]
    services = [s for s in manifests if s["kind"] == "Service" and s["metadata"]["labels"].get(expression["key"])]
    selected = [s for s in services if s["metadata"]["labels"][expression["key"]] in expression["values"]]
    assert len(selected) == len(expression["values"])
    service_ports = {port["name"] for service in selected for port in service["spec"]["ports"]}
    assert {endpoint["port"] for endpoint in monitor["spec"]["endpoints"]} == service_ports
    pod_monitor = _one(manifests, "PodMonitor", "triton")
    pods = [d for d in manifests if d["kind"] == "Deployment" and d["metadata"]["name"].startswith("triton-")]
    for deployment in pods:
        assert pod_monitor["spec"]["selector"]["matchLabels"].items() <= deployment["metadata"]["labels"].items()
        names = {port["name"] for port in _pod(deployment)["containers"][0]["ports"]}
        assert {endpoint["port"] for endpoint in pod_monitor["spec"]["podMetricsEndpoints"]} <= names


# ---- the readiness script, run against a fake Triton --------------------------------------------


class _FakeTriton(BaseHTTPRequestHandler):
    ready = 200
    heartbeats: Iterator[float] = iter(())

    def do_GET(self) -> None:
        if self.path == "/v2/health/ready":
            status, body = self.ready, b""
        else:
            status, body = 200, f"switchyard_engine_heartbeat {next(self.heartbeats)}\n".encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize(
    ("ready", "heartbeats", "expected"),
    [(200, [1.0, 1.2], 0), (200, [1.0, 1.0], 1), (503, [1.0, 1.2], 1)],
    ids=["ready-and-beating", "heartbeat-stopped", "triton-not-ready"],
)
def test_readiness_script(ready: int, heartbeats: list[float], expected: int) -> None:
    source = _config_map(render(DEPLOY / "base"))["data"]["triton_ready.py"]
    namespace: dict[str, Any] = {"__name__": "triton_ready"}
    exec(compile(source, "triton_ready.py", "exec"), namespace)
    handler = type("Handler", (_FakeTriton,), {"ready": ready, "heartbeats": iter(heartbeats)})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = str(server.server_address[1])
        assert namespace["main"]([port, port]) == expected
    finally:
        server.shutdown()
        server.server_close()
