"""Ray's Serve REST API, so Ray's `serve deploy/status/shutdown --address http://HEAD:8265` and
KubeRay's RayService drive Serve on a raylite cluster.

    GET    /api/serve/applications/[?api_type=imperative|declarative]   ServeInstanceDetails
    PUT    /api/serve/applications/   a ServeDeploySchema: deploy or replace every application
    DELETE /api/serve/applications/   shut Serve down (every application is deleted)

The work is done by the Serve REST agent (see raylite.dashboard.serve_agent): this module only
reads and bounds the request, and answers as Ray's head does (errors as plain text: 400 for a
config that does not fit the schema, naming the field; 413 past MAX_CONFIG_BYTES; 503 when the
agent cannot be reached).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from raylite.dashboard.job_manager import JobError
from raylite.dashboard.routes.jobs import _body
from raylite.dashboard.serve_agent import AgentError, ServeAgent

MAX_CONFIG_BYTES = 8 * 1024 * 1024
_API_TYPES = ("imperative", "declarative")


async def shutdown(ctx: Any) -> None:
    agent = ctx.extras.get("serve_agent")
    if agent is not None:
        await agent.close()


def _agent(ctx: Any) -> ServeAgent:
    agent = ctx.extras.get("serve_agent")
    if agent is None:
        agent = ctx.extras["serve_agent"] = ServeAgent(ctx)
    return agent


async def _ask(ctx: Any, op: str, **fields: Any) -> Response:
    try:
        reply = await _agent(ctx).request(op, **fields)
    except AgentError as e:
        return PlainTextResponse(f"Serve could not be reached: {e}", 503)
    if reply.get("status") != 200:
        return PlainTextResponse(str(reply.get("error", "")), int(reply.get("status") or 500))
    body = reply.get("body")
    return Response() if body is None else JSONResponse(body)


def routes(ctx: Any) -> list:
    async def get_details(request: Request) -> Response:
        api_type = request.query_params.get("api_type")
        if api_type is not None:
            api_type = api_type.lower()
            if api_type not in _API_TYPES:
                return PlainTextResponse(f"Invalid 'api_type' value: '{request.query_params['api_type']}'. "
                                         f"Must be one of: {', '.join(_API_TYPES)}", 400)
        return await _ask(ctx, "details", api_type=api_type)

    async def put_applications(request: Request) -> Response:
        try:
            raw = await _body(request, MAX_CONFIG_BYTES, "a Serve config")
        except JobError as e:
            return PlainTextResponse(str(e), e.status)
        try:
            config = json.loads(raw)
        except (ValueError, RecursionError) as e:  # RecursionError: nested thousands deep
            return PlainTextResponse(f"the request body is not JSON ({e}); send a ServeDeploySchema object "
                                     "such as {\"applications\": [{\"import_path\": \"module:app\"}]}", 400)
        if not isinstance(config, dict):
            return PlainTextResponse("the request body must be a JSON object (a ServeDeploySchema), not "
                                     f"{type(config).__name__}", 400)
        return await _ask(ctx, "deploy", config=config)

    async def delete_applications(request: Request) -> Response:
        return await _ask(ctx, "delete")

    return [
        Route("/api/serve/applications/", get_details, methods=["GET"]),
        Route("/api/serve/applications/", put_applications, methods=["PUT"]),
        Route("/api/serve/applications/", delete_applications, methods=["DELETE"]),
    ]
