"""Per-request and per-replica context.

`_serve_request_context` is set by the replica around every request it runs (HTTP or handle
call), so user code and `@serve.multiplexed` can read the route, request id, app and
multiplexed model id without the values being threaded through every signature.
`ReplicaContext` is what `serve.get_replica_context()` returns inside a replica.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RequestContext:
    """What the replica knows about the request being handled."""

    route: str = ""
    request_id: str = ""
    app_name: str = ""
    multiplexed_model_id: str = ""


_serve_request_context: contextvars.ContextVar[RequestContext] = contextvars.ContextVar(
    "serve_request_context", default=RequestContext())  # noqa: B039 - never mutated
# inside a @serve.batch function: the contexts of the requests in the batch, in batch order
_serve_batch_request_context: contextvars.ContextVar[list[RequestContext]] = contextvars.ContextVar(
    "serve_batch_request_context", default=[])  # noqa: B039 - replaced, never mutated


def _get_serve_request_context() -> RequestContext:
    """The context of the request being handled (Ray's accessor); inside a batch function, where
    no single request is being handled, an empty one."""
    return _serve_request_context.get()


def _get_serve_batch_request_context() -> list[RequestContext]:
    """Inside a @serve.batch function: the context of each request of the batch (Ray's accessor)."""
    return list(_serve_batch_request_context.get())


@dataclass(frozen=True)
class ReplicaRank:
    """Where a replica stands in its deployment: `rank` in 0..num_replicas-1, the rank of its node
    among the deployment's nodes, and its rank among the deployment's replicas on that node."""

    rank: int = 0
    node_rank: int = 0
    local_rank: int = 0


@dataclass
class GangContext:
    """For gang-scheduled deployments: the replica's gang, its rank in it and the members (by rank)."""

    gang_id: str
    rank: int
    world_size: int
    member_replica_ids: list[str]
    pg_name: str = ""


@dataclass
class ReplicaContext:
    """Ray's `ReplicaContext`: which replica of which deployment this code runs in."""

    app_name: str
    deployment: str
    replica_tag: str
    servable_object: Any = None
    rank: ReplicaRank = field(default_factory=ReplicaRank)
    replica_id: Any = field(default=None)
    world_size: int = 1
    gang_context: GangContext | None = None
    _version: str = ""


_INTERNAL_REPLICA_CONTEXT: ReplicaContext | None = None


def _set_internal_replica_context(ctx: ReplicaContext | None) -> None:
    global _INTERNAL_REPLICA_CONTEXT
    _INTERNAL_REPLICA_CONTEXT = ctx


def _get_internal_replica_context() -> ReplicaContext | None:
    return _INTERNAL_REPLICA_CONTEXT
