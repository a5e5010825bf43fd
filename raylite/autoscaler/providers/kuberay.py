"""The KubeRay node provider: worker groups of a `RayCluster` are the node types, its worker
pods are the nodes, and scaling is a JSON patch of the RayCluster that KubeRay's operator then
carries out (as Ray's own KubeRay autoscaler sidecar does).

- node types: `spec.workerGroupSpecs[i]` (groupName; minReplicas/maxReplicas; resources from
  rayStartParams num-cpus/num-gpus/memory/resources, else from the first container's
  resource limits, else its requests); idle timeout from
  `spec.autoscalerOptions.idleTimeoutSeconds`; upscaling speed from `upscalingMode`
  (Conservative: 1, Default/Aggressive: 1000, as in Ray).
- nodes: pods labelled `ray.io/cluster=<name>`, `ray.io/node-type=worker`, grouped by
  `ray.io/group`; pods being deleted (metadata.deletionTimestamp) are left out; replicas the
  operator has not made pods for yet count as launching. A pod is a raylite node with its IP.
- scale up: replace `/spec/workerGroupSpecs/<i>/replicas`; scale down: replicas minus the
  pods, which go into `/spec/workerGroupSpecs/<i>/scaleStrategy/workersToDelete`.
- while a pod named in a workersToDelete list still exists, nothing is changed (`ready()`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from raylite.autoscaler.policy import NodeType
from raylite.autoscaler.providers.base import ProviderNode
from raylite.autoscaler.providers.kube_api import KubeAPI, quote

LABEL_CLUSTER = "ray.io/cluster"
LABEL_KIND = "ray.io/node-type"
LABEL_GROUP = "ray.io/group"
CRD_VERSION = "v1"  # KubeRay sets KUBERAY_CRD_VER in the sidecar's environment (v1 today)
UPSCALING_SPEED = {"Conservative": 1.0, "Default": 1000.0, "Aggressive": 1000.0}
_SUFFIX = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def parse_quantity(value: Any) -> float:
    """A Kubernetes quantity ("500m", "2", "4Gi", "1e3") as a number."""
    if isinstance(value, (int, float)):
        return float(value)
    m = re.fullmatch(r"\s*([0-9.]+(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Z]*)\s*", str(value))
    if not m or (m.group(2) and m.group(2) not in _SUFFIX):
        raise ValueError(f"{value!r} is not a Kubernetes quantity (like 2, 500m, 4Gi)")
    return float(m.group(1)) * _SUFFIX.get(m.group(2), 1.0)


def _start_param_resources(raw: Any) -> dict[str, float]:
    """rayStartParams.resources: a JSON object, often wrapped in quotes ('"{\\"Custom\\": 1}"')."""
    text = str(raw).strip()
    while len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    text = text.replace('\\"', '"')
    try:
        parsed = json.loads(text)
    except ValueError as e:
        raise ValueError(f"rayStartParams.resources {raw!r} is not a JSON object like '\"{{\\\"Custom\\\": 1}}\"'") from e
    if not isinstance(parsed, dict):
        raise ValueError(f"rayStartParams.resources {raw!r} must be a JSON object")
    return {str(k): float(v) for k, v in parsed.items()}


def group_resources(group: Mapping[str, Any]) -> dict[str, float]:
    """The resources a worker of this group offers, as its `ray start` would compute them."""
    params = group.get("rayStartParams") or {}
    containers = ((group.get("template") or {}).get("spec") or {}).get("containers") or [{}]
    res_spec = containers[0].get("resources") or {}
    limits = {**(res_spec.get("requests") or {}), **(res_spec.get("limits") or {})}
    out: dict[str, float] = {}
    if "num-cpus" in params:
        out["CPU"] = float(params["num-cpus"])
    elif "cpu" in limits:
        out["CPU"] = float(math.ceil(parse_quantity(limits["cpu"]) - 1e-9))
    gpu_limit = sum(parse_quantity(v) for k, v in limits.items() if k.endswith("/gpu"))
    if "num-gpus" in params:
        out["GPU"] = float(params["num-gpus"])
    elif gpu_limit:
        out["GPU"] = gpu_limit
    if "memory" in params:
        out["memory"] = float(params["memory"])
    elif "memory" in limits:
        out["memory"] = parse_quantity(limits["memory"])
    if "resources" in params:
        out.update(_start_param_resources(params["resources"]))
    return {k: v for k, v in out.items() if v}


class KubeRayProvider:
    def __init__(self, cluster_name: str, namespace: str, api: KubeAPI, crd_version: str = CRD_VERSION) -> None:
        if not cluster_name or not namespace:
            raise ValueError("the RayCluster's name and namespace are needed (--cluster-name, --cluster-namespace)")
        self.crd_version = crd_version
        self.cluster_name = cluster_name
        self.namespace = namespace
        self.api = api
        self._cr: dict[str, Any] | None = None
        self._pods: list[dict[str, Any]] | None = None

    # --------------------------------------------------------------- reading
    @property
    def _cr_path(self) -> str:
        return f"/apis/ray.io/{quote(self.crd_version)}/namespaces/{quote(self.namespace)}/rayclusters/{quote(self.cluster_name)}"

    def refresh(self) -> None:
        """Read the RayCluster and its pods again (once per round)."""
        self._cr = self.api.get(self._cr_path)
        selector = quote(f"{LABEL_CLUSTER}={self.cluster_name}")
        self._pods = self.api.get(f"/api/v1/namespaces/{quote(self.namespace)}/pods?labelSelector={selector}")["items"]

    def _raycluster(self) -> dict[str, Any]:
        if self._cr is None:
            self.refresh()
        assert self._cr is not None
        return self._cr

    def _worker_pods(self) -> list[dict[str, Any]]:
        if self._pods is None:
            self.refresh()
        return [p for p in self._pods or [] if (p.get("metadata", {}).get("labels") or {}).get(LABEL_KIND) == "worker"
                and not p["metadata"].get("deletionTimestamp")]

    def _groups(self) -> list[dict[str, Any]]:
        return list(self._raycluster().get("spec", {}).get("workerGroupSpecs") or [])

    def node_types(self) -> list[NodeType]:
        out = []
        for g in self._groups():
            if g.get("suspend"):
                continue
            replicas_max = g.get("maxReplicas")
            out.append(NodeType(g["groupName"], group_resources(g), int(g.get("minReplicas") or 0),
                                int(replicas_max if replicas_max is not None else 2**31 - 1)))
        return out

    def idle_timeout_s(self) -> float | None:
        opts = self._raycluster().get("spec", {}).get("autoscalerOptions") or {}
        value = opts.get("idleTimeoutSeconds")
        return None if value is None else float(value)

    def upscaling_speed(self) -> float:
        opts = self._raycluster().get("spec", {}).get("autoscalerOptions") or {}
        return UPSCALING_SPEED.get(str(opts.get("upscalingMode") or "Default"), 1000.0)

    def non_terminated_nodes(self) -> list[ProviderNode]:
        pods = self._worker_pods()
        out = []
        for g in self._groups():
            name = g["groupName"]
            mine = [p for p in pods if p["metadata"]["labels"].get(LABEL_GROUP) == name]
            doomed = set((g.get("scaleStrategy") or {}).get("workersToDelete") or [])
            live = [p for p in mine if p["metadata"]["name"] not in doomed]
            for p in live:
                out.append(ProviderNode(p["metadata"]["name"], name, (p.get("status") or {}).get("podIP", "")))
            for i in range(max(0, int(g.get("replicas") or 0) - len(live))):  # not made by the operator yet
                out.append(ProviderNode(f"{name}-replica-{i}-not-created", name))
        return out

    def ready(self) -> bool:
        """False while a pod named in a workersToDelete list still exists: the operator has not
        carried out the last scale-down, and a new patch could undo it (Ray's rule)."""
        names = {p["metadata"]["name"] for p in self._worker_pods()}
        return not any(set((g.get("scaleStrategy") or {}).get("workersToDelete") or []) & names
                       for g in self._groups())

    def matches(self, node: ProviderNode, raylite_node: Mapping[str, Any]) -> bool:
        return bool(node.ip) and node.ip == raylite_node.get("ip")

    # --------------------------------------------------------------- scaling
    def _index(self, group_name: str) -> tuple[int, dict[str, Any]]:
        for i, g in enumerate(self._groups()):
            if g["groupName"] == group_name:
                return i, g
        raise KeyError(f"RayCluster {self.cluster_name} has no worker group {group_name!r}")

    def create_nodes(self, node_type: str, count: int) -> None:
        self.refresh()
        i, g = self._index(node_type)
        target = int(g.get("replicas") or 0) + count
        if g.get("maxReplicas") is not None:
            target = min(target, int(g["maxReplicas"]))
        self.api.json_patch(self._cr_path, [{"op": "replace", "path": f"/spec/workerGroupSpecs/{i}/replicas",
                                              "value": target}])
        self._cr = None

    def terminate_nodes(self, node_ids: Sequence[str]) -> None:
        self.refresh()
        by_group: dict[str, list[str]] = {}
        for p in self._worker_pods():
            if p["metadata"]["name"] in node_ids:
                by_group.setdefault(p["metadata"]["labels"][LABEL_GROUP], []).append(p["metadata"]["name"])
        for group_name, names in sorted(by_group.items()):
            i, g = self._index(group_name)
            prefix = f"/spec/workerGroupSpecs/{i}"
            replicas = max(int(g.get("minReplicas") or 0), int(g.get("replicas") or 0) - len(names))
            ops: list[dict[str, Any]] = [{"op": "replace", "path": f"{prefix}/replicas", "value": replicas}]
            if isinstance(g.get("scaleStrategy"), dict):
                ops.append({"op": "add", "path": f"{prefix}/scaleStrategy/workersToDelete", "value": sorted(names)})
            else:
                ops.append({"op": "add", "path": f"{prefix}/scaleStrategy", "value": {"workersToDelete": sorted(names)}})
            self.api.json_patch(self._cr_path, ops)
        self._cr = None
