"""The Kubernetes actuator against a fake AppsV1Api: it reads the Deployment's scale and patches
the replicas only when they differ, on `triton-<pool>` in its namespace."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from autoscaler.kubernetes_actuator import KubernetesActuator, deployment_name


class FakeAppsV1Api:
    """The scale subresource of a few Deployments, and every call made to it."""

    def __init__(self, replicas: dict[tuple[str, str], int | None]) -> None:
        self.replicas = replicas
        self.calls: list[tuple[str, str, str, Any]] = []

    def read_namespaced_deployment_scale(self, name: str, namespace: str) -> Any:
        self.calls.append(("read", name, namespace, None))
        if (namespace, name) not in self.replicas:
            raise LookupError(f"deployments.apps {name!r} not found")  # the real client raises ApiException 404
        return SimpleNamespace(spec=SimpleNamespace(replicas=self.replicas[namespace, name]))

    def patch_namespaced_deployment_scale(self, name: str, namespace: str, body: Any) -> Any:
        self.calls.append(("patch", name, namespace, body))
        self.replicas[namespace, name] = body["spec"]["replicas"]
        return SimpleNamespace(spec=SimpleNamespace(replicas=body["spec"]["replicas"]))


async def test_apply_patches_the_pools_deployment_scale() -> None:
    api = FakeAppsV1Api({("serving", "triton-small"): 1})
    actuator = KubernetesActuator(api, "serving")
    await actuator.apply("small", 3)
    assert api.calls == [
        ("read", "triton-small", "serving", None),
        ("patch", "triton-small", "serving", {"spec": {"replicas": 3}}),
    ]
    assert await actuator.requested("small") == 3


async def test_an_unchanged_target_is_not_patched() -> None:
    api = FakeAppsV1Api({("serving", "triton-small"): 2})
    await KubernetesActuator(api, "serving").apply("small", 2)
    assert [call[0] for call in api.calls] == ["read"]


async def test_unset_replicas_read_as_zero_and_names_can_be_mapped() -> None:
    api = FakeAppsV1Api({("ns", "llm-large"): None})
    actuator = KubernetesActuator(api, "ns", deployment=lambda pool: f"llm-{pool}")
    assert await actuator.requested("large") == 0
    await actuator.apply("large", 1)
    assert api.replicas[("ns", "llm-large")] == 1


async def test_a_missing_deployment_raises_and_a_negative_target_is_refused() -> None:
    actuator = KubernetesActuator(FakeAppsV1Api({}), "ns")
    with pytest.raises(LookupError):
        await actuator.apply("small", 1)
    with pytest.raises(ValueError, match="copies must be >= 0"):
        await actuator.apply("small", -1)


def test_deployments_are_named_as_the_overlays_name_them() -> None:
    assert deployment_name("small") == "triton-small"
