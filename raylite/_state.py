"""Bodies of raylite.util.state's object listing (the public layer's access to the core).

An object's facts are spread over the cluster: its owner knows its size (inline values
live only there) and its borrowers; each node's store knows whether its copy is in
shared memory or spilled; every process knows its own references. `list_objects` asks
every node (GetNodeInfo) and every driver and worker those nodes know
(ListOwnedObjects), then joins the answers by object id.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from raylite._core import runtime


@dataclass
class ObjectState:
    """One object, as `raylite.util.state.list_objects()` reports it (Ray's field names where
    Ray has them: object_id, object_size, reference_type, task_status, pid, ip, type)."""

    object_id: str
    object_size: int  # bytes; 0 while the value is not ready
    owner_address: str
    location: str  # INLINE | SHARED_MEMORY | SPILLED | PENDING | ERROR | UNKNOWN
    reference_type: str  # LOCAL_REFERENCE | USED_BY_PENDING_TASK | CAPTURED_IN_OBJECT | BORROWED | PINNED_IN_MEMORY
    task_status: str  # FINISHED | PENDING | FAILED
    pid: int | None = None  # the owner's process
    ip: str = ""
    type: str = ""  # DRIVER | WORKER (the owner)
    node_id: str = ""  # the node whose store holds it ("" for inline values)
    reference_holders: list[dict[str, Any]] = field(default_factory=list)

    def __getitem__(self, key: str) -> Any:  # Ray's rows are read both ways
        return getattr(self, key)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def list_objects(address: str | None = None, filters: list[tuple[str, str, Any]] | None = None,
                 limit: int = 100, timeout: int = 30, detail: bool = False,
                 raise_on_missing_output: bool = True, _explain: bool = False) -> list[ObjectState]:
    """Ray's signature; `address` is accepted for compatibility (the connected cluster is used)."""
    client = runtime.client()
    nodes, processes = client.object_tables(timeout_s=timeout)
    rows = _join(nodes, processes)
    for key, op, value in filters or []:
        rows = [r for r in rows if _matches(getattr(r, key, None), op, value)]
    return rows[:limit]


def summarize_objects(address: str | None = None, timeout: int = 30, raise_on_missing_output: bool = True,
                      _explain: bool = False) -> dict[str, Any]:
    """Totals: object count and bytes per location and per owner process."""
    rows = list_objects(timeout=timeout, limit=10**9)
    by_location: dict[str, dict[str, int]] = {}
    by_owner: dict[str, dict[str, int]] = {}
    for r in rows:
        loc = by_location.setdefault(r.location, {"count": 0, "bytes": 0})
        loc["count"] += 1
        loc["bytes"] += r.object_size
        own = by_owner.setdefault(f"{r.type or '?'} pid={r.pid}", {"count": 0, "bytes": 0})
        own["count"] += 1
        own["bytes"] += r.object_size
    return {"total_objects": len(rows), "total_bytes": sum(r.object_size for r in rows),
            "by_location": by_location, "by_owner": by_owner}


def _join(node_infos: list[Any], processes: dict[str, Any]) -> list[ObjectState]:
    stored: dict[bytes, tuple[int, str, str, str]] = {}  # oid -> (size, owner, where, node id)
    for n, info in node_infos:
        for oid, size, owner, where in info.objects:
            prev = stored.get(oid)
            if prev is None or prev[2] != "shared_memory":
                stored[oid] = (size, owner, where, n["node_id"].hex())
    rows: dict[bytes, ObjectState] = {}
    holders: dict[bytes, list[dict[str, Any]]] = {}
    for address, (kind, pid, ip, objects) in processes.items():
        for oid, owned, _owner, okind, size, local, submitted, borrowers, contained in objects:
            holders.setdefault(oid, []).append({
                "address": address, "pid": pid, "ip": ip, "type": kind.upper(), "owner": bool(owned),
                "local_refs": local, "pending_task_refs": submitted, "captured_in_objects": contained,
                "borrowers": list(borrowers)})
            if owned:
                rows[oid] = ObjectState(oid.hex(), size, address, _location(okind, stored.get(oid)),
                                        "", _task_status(okind), pid, ip, kind.upper())
    for oid, (size, owner, where, node_hex) in stored.items():
        row = rows.get(oid)
        if row is None:  # the owner did not answer: the store still knows it
            row = rows[oid] = ObjectState(oid.hex(), size, owner, "UNKNOWN", "", "FINISHED")
        row.node_id = node_hex
        row.object_size = row.object_size or size
        row.location = "SPILLED" if where == "spilled" else "SHARED_MEMORY"
    out = []
    for oid, row in rows.items():
        row.reference_holders = holders.get(oid, [])
        row.reference_type = _reference_type(row)
        out.append(row)
    out.sort(key=lambda r: -r.object_size)
    return out


def _location(kind: str, stored: tuple[int, str, str, str] | None) -> str:
    if kind == "v":
        return "INLINE"
    if kind == "e":
        return "ERROR"
    if kind == "s":
        if stored is None:
            return "SHARED_MEMORY"
        return "SPILLED" if stored[2] == "spilled" else "SHARED_MEMORY"
    return "PENDING"


def _task_status(kind: str) -> str:
    return {"": "PENDING", "e": "FAILED"}.get(kind, "FINISHED")


def _reference_type(row: ObjectState) -> str:
    kinds = []
    for h in row.reference_holders:
        if h["local_refs"] > 0:
            kinds.append("LOCAL_REFERENCE" if h["owner"] else "BORROWED")
        if h["pending_task_refs"] > 0:
            kinds.append("USED_BY_PENDING_TASK")
        if h["captured_in_objects"] > 0:
            kinds.append("CAPTURED_IN_OBJECT")
        if h["owner"] and h["borrowers"]:
            kinds.append("BORROWED")
    order = ["LOCAL_REFERENCE", "USED_BY_PENDING_TASK", "BORROWED", "CAPTURED_IN_OBJECT"]
    return next((k for k in order if k in kinds), "PINNED_IN_MEMORY")


def _matches(actual: Any, op: str, value: Any) -> bool:
    if op in ("=", "=="):  # string values compare case-insensitively, as in Ray
        return str(actual).lower() == str(value).lower()
    if op == "!=":
        return str(actual).lower() != str(value).lower()
    raise ValueError(f"unsupported filter operator {op!r}: use '=' or '!='")


def format_objects(rows: list[ObjectState]) -> str:
    """A table for `raylite memory` and for printing in a notebook."""
    lines = [f"{'OBJECT ID':<42} {'SIZE':>10} {'WHERE':<14} {'REFERENCE':<22} {'OWNER':<18} HOLDERS"]
    for r in rows:
        owner = f"{r.type.lower() or '?'} pid={r.pid}"
        held = ", ".join(f"{h['type'].lower()} pid={h['pid']}" + ("" if h["owner"] else " (borrower)")
                         for h in r.reference_holders)
        lines.append(f"{r.object_id:<42} {_size(r.object_size):>10} {r.location:<14} {r.reference_type:<22} "
                     f"{owner:<18} {held}")
    total = sum(r.object_size for r in rows)
    lines.append(f"{len(rows)} objects, {_size(total)} in all")
    return "\n".join(lines)


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


# ------------------------------------------------------------------ the autoscaler's view of the head
def get_cluster_demand(address: str | None = None) -> dict[str, Any]:
    """The head's nodes and what waits for resources, in Ray's units (floats), for an
    autoscaler: {"nodes": [{node_id (hex), ip, alive, labels, total, available, pending,
    idle_s, is_head}], "demands": {"waiting": [...], "actors": [...], "placement_groups":
    [{bundles, strategy}], "requested": [...]}}. `idle_s` is how long the node has had nothing
    running, reserved, queued or stored; "waiting" are requests no node fits yet that a node
    type of the autoscaler would (they stay pending while its view is published)."""
    import json

    from raylite._core import resources as R
    from raylite._core.cluster import cluster as C
    from raylite._core.config import get_config

    raw = C.cluster_demand(get_config(), address or "auto")
    nodes = []
    for n in raw["nodes"]:
        nodes.append({"node_id": n["node_id"].hex(), "ip": n["ip"], "alive": n["alive"],
                      "labels": dict(n.get("labels") or {}), "total": R.from_fixed(n["total"]),
                      "available": R.from_fixed(n["available"]),
                      "pending": [R.from_fixed(p) for p in n.get("pending") or []],
                      "idle_s": float(n.get("idle_s") or 0.0),
                      "is_head": "node:__internal_head__" in n["total"]})
    d = raw["demands"]
    requested = json.loads(d["requested"]).get("bundles", []) if d.get("requested") else []
    return {"nodes": nodes, "demands": {
        "waiting": [R.from_fixed(r) for r in d.get("waiting", [])],
        "actors": [R.from_fixed(r) for r in d.get("actors", [])],
        "placement_groups": [{"bundles": [R.from_fixed(b) for b in pg["bundles"]], "strategy": pg["strategy"]}
                             for pg in d.get("placement_groups", [])],
        "requested": requested}}


def publish_autoscaler_view(view: dict[str, Any] | None, address: str | None = None) -> None:
    """Store an autoscaler's view in the head's KV: {"node_types": {name: {"resources": {...},
    "min_workers", "max_workers"}}, "launching": N, ...}. While it is there, requests that only
    a launchable node type fits stay pending instead of failing, and `raylite status` shows it.
    None removes it (requests no node fits fail again)."""
    import json

    from raylite._core.cluster import cluster as C
    from raylite._core.config import get_config

    C.publish_autoscaler_view(get_config(), address or "auto", b"" if view is None else json.dumps(view).encode())


def request_resources_row(request: bytes) -> None:
    """Replace the standing `request_resources()` demand (JSON {"bundles": [...]}, b"" drops it)
    in the cluster this process is connected to (raylite.autoscaler.sdk)."""
    from raylite import api

    api.ensure_initialized().set_resource_request(request)
