"""The Kubernetes actuator: a pool's copies are the replicas of its Deployment (`triton-<pool>`,
as deploy/overlays name them), set through the Deployment's scale subresource with the
official `kubernetes` client.

    read_namespaced_deployment_scale(name, ns)              what the Deployment asks for now
    patch_namespaced_deployment_scale(name, ns, {"spec": {"replicas": n}})   only when it differs

Scaling in removes pods; each drains in its preStop hook (deploy/base/triton.yaml) before
Kubernetes stops it, so no reply is cut. The permissions it needs are `get` and `patch` on
`deployments/scale` in the namespace (deploy/base/autoscaler.yaml); docs/autoscaler.md shows
how to run it against a cluster.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

logger = logging.getLogger(__name__)

_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class ScaleApi(Protocol):
    """The two calls of `kubernetes.client.AppsV1Api` this actuator makes."""

    def read_namespaced_deployment_scale(self, name: str, namespace: str) -> Any: ...

    def patch_namespaced_deployment_scale(self, name: str, namespace: str, body: Any) -> Any: ...


def deployment_name(pool_id: str) -> str:
    """The pool's Deployment, as deploy/overlays/<pool> names it."""
    return f"triton-{pool_id}"


class KubernetesActuator:
    """Sets each pool's Deployment replicas; the client calls run in a worker thread (the
    official client is synchronous)."""

    name = "kubernetes"

    def __init__(self, apps: ScaleApi, namespace: str, deployment: Callable[[str], str] = deployment_name) -> None:
        self._apps = apps
        self._namespace = namespace
        self._deployment = deployment

    @classmethod
    def from_environment(cls, namespace: str | None = None) -> KubernetesActuator:
        """In a pod: its service account (in-cluster config) and its own namespace. Elsewhere:
        the current kubeconfig context, and `namespace` (default `switchyard`)."""
        from kubernetes import client, config

        try:
            config.load_incluster_config()
            default_namespace = _NAMESPACE_FILE.read_text().strip()
        except config.ConfigException:
            config.load_kube_config()
            default_namespace = "switchyard"
        return cls(client.AppsV1Api(), namespace or default_namespace)

    async def apply(self, pool_id: str, copies: int) -> None:
        if copies < 0:
            raise ValueError(f"pool {pool_id!r}: copies must be >= 0, got {copies}")
        name = self._deployment(pool_id)
        current = await self.requested(pool_id)
        if current == copies:
            return
        await asyncio.to_thread(
            self._apps.patch_namespaced_deployment_scale, name, self._namespace, {"spec": {"replicas": copies}}
        )
        logger.info("deployment %s/%s: replicas %s -> %d", self._namespace, name, current, copies)

    async def requested(self, pool_id: str) -> int | None:
        scale = await asyncio.to_thread(
            self._apps.read_namespaced_deployment_scale, self._deployment(pool_id), self._namespace
        )
        replicas = scale.spec.replicas if scale.spec is not None else None
        return int(replicas) if replicas is not None else 0
