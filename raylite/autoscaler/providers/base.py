"""The seam between the autoscaler's loop and the machines: a `NodeProvider`.

A provider lists the worker nodes it made (launching or running, each with its node type and
the address its raylite node will have), launches more of a type and terminates given ones. The
head is never among them. Matching a provider's node to a raylite node is the provider's job
(`matches`): by IP on Kubernetes (a pod's IP is its node's), by a node label on local hosts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from raylite.autoscaler.policy import NodeType


@dataclass(frozen=True)
class ProviderNode:
    node_id: str  # the provider's name for it: a pod name, "<host>/<n>"
    node_type: str
    ip: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)  # labels its raylite node will carry


class NodeProvider(Protocol):
    def node_types(self) -> Sequence[NodeType]: ...

    def idle_timeout_s(self) -> float | None: ...

    def non_terminated_nodes(self) -> list[ProviderNode]: ...

    def ready(self) -> bool:
        """False while an earlier change is still being carried out (then the loop waits)."""
        ...

    def create_nodes(self, node_type: str, count: int) -> None: ...

    def terminate_nodes(self, node_ids: Sequence[str]) -> None: ...

    def matches(self, node: ProviderNode, raylite_node: Mapping[str, Any]) -> bool: ...
