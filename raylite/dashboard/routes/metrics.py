"""/metrics: the whole cluster in Prometheus text format (one scrape point).

The head computes every family (raylite/_core/head/cluster_metrics.py): nodes, workers,
object stores, GPUs, actors, tasks, Serve and Train feeds, and the user's
`raylite.util.metrics` values summed over every process. Point Prometheus at
http://<head>:8265/metrics (with the cluster token as a bearer token off loopback).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


def routes(ctx: Any) -> list:
    async def metrics(request: Request) -> Response:
        from raylite._core import protocol as P
        from raylite.dashboard.prometheus import CONTENT_TYPE, render

        families = (await ctx.head.request(P.GetClusterMetrics())).families
        return Response(render(families), media_type=CONTENT_TYPE)

    return [Route("/metrics", metrics)]
