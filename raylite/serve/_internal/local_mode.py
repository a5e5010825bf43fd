"""`serve.run(app, _local_testing_mode=True)`: every deployment's replicas in this process.

As in Ray, for unit tests of deployment code: no cluster, no controller and no HTTP proxy; the
returned handle (and handles passed between deployments) work as usual, over the same framed
Unix-socket channel, with all replicas on one event loop in a background thread. Autoscaling,
health checks and `serve.status()` are not available in this mode.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from raylite.serve import context as serve_context
from raylite.serve._internal import client as _client

_replicas: list[Any] = []


def run_local(app: Any, name: str) -> Any:
    from raylite.serve._internal.replica import ReplicaImpl
    from raylite.serve.application import build_app
    from raylite.serve.handle import DeploymentHandle

    _client.reset()
    _client.set_local_mode(True)
    targets, ingress = build_app(app, name)
    loop = _client.get_loop()
    state = _client.state()
    for dname, target in targets.items():
        cfg = dict(target["config"])
        auto = cfg.get("autoscaling_config") or {}
        count = cfg.get("num_replicas") or auto.get("initial_replicas") or auto.get("min_replicas") or 1
        infos = []
        for _ in range(max(1, int(count))):
            rid = f"{name}#{dname}#{uuid.uuid4().hex[:6]}"
            impl = ReplicaImpl(name, dname, rid, target["definition"], target["init_args"], cfg, loop=loop)
            infos.append(asyncio.run_coroutine_threadsafe(impl.initialize(), loop).result())
            _replicas.append(impl)
        router = asyncio.run_coroutine_threadsafe(_router(state, name, dname), loop).result()
        loop.call_soon_threadsafe(router.update, {
            "replicas": infos, "max_ongoing_requests": cfg.get("max_ongoing_requests", 5),
            "max_queued_requests": cfg.get("max_queued_requests", -1)})
    return DeploymentHandle(ingress, name)


async def _router(state: Any, app: str, dep: str) -> Any:
    return state.router(app, dep)


def shutdown_local() -> bool:
    """Stop the in-process replicas; True if local mode was on."""
    if not _client._local_mode:
        return False
    loop = _client.get_loop()
    for impl in _replicas:
        try:
            asyncio.run_coroutine_threadsafe(impl.shutdown(0.1, 5.0), loop).result(timeout=10)
        except Exception:  # noqa: BLE001
            pass
    _replicas.clear()
    _client.reset()
    _client.set_local_mode(False)
    # the replicas ran in this process: it is not "inside a replica" any more
    serve_context._set_internal_replica_context(None)
    return True
