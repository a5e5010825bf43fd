"""Ray's `GET /nodes?view=summary`, in Ray's dashboard shape (behind the token like every route).

KubeRay's RayJob in SidecarMode waits for the cluster's workers before it submits: with
RAY_EXPECTED_MIN_WORKERS set, its submitter counts the entries of `data.summary` whose
`raylet.state` is "ALIVE" (common/job.go, BuildJobSubmitCommand) and loops until there are
enough. Without this route that count stays 0 and the RayJob never starts.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from raylite.dashboard.routes.dashboard_api import nodes as node_rows

_VIEWS = ("summary", "hostnamelist")


def summary_entry(row: dict[str, Any]) -> dict[str, Any]:
    """One node of Ray's summary view from raylite's node row (dashboard_api.nodes)."""
    stats = row.get("stats") or {}
    return {
        "ip": row["ip"],
        "hostname": stats.get("hostname", row["ip"]),
        "raylet": {
            "nodeId": row["node_id"], "state": row["state"], "nodeManagerAddress": row["ip"],
            "isHeadNode": row["is_head"], "resourcesTotal": row["resources_total"],
            "labels": row["labels"], "stateMessage": row.get("death_cause") or None,
        },
    }


def routes(ctx: Any) -> list:
    async def nodes(request: Request) -> JSONResponse:
        view = (request.query_params.get("view") or "").lower()
        if view not in _VIEWS:
            return JSONResponse({"result": False, "msg": f"view={view!r} is not supported; use view=summary "
                                 "or view=hostNameList", "data": {}}, status_code=400)
        rows = await node_rows(ctx)
        if view == "hostnamelist":
            names = sorted({summary_entry(r)["hostname"] for r in rows if r["state"] == "ALIVE"})
            return JSONResponse({"result": True, "msg": "Node hostname list fetched.",
                                 "data": {"hostNameList": names}})
        return JSONResponse({"result": True, "msg": "Node summary fetched.",
                             "data": {"summary": [summary_entry(r) for r in rows]}})

    return [Route("/nodes", nodes)]
