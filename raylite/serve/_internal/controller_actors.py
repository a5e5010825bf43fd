"""Deployment-scoped actors (`deployment_actors=[DeploymentActorConfig(...)]`), kept by the controller.

Each actor belongs to one version of one deployment and has a fixed name,
`SERVE_DEPLOYMENT_ACTOR::<app>#<deployment>#<version>#<name>` in the "serve" namespace, which is
how `serve.get_deployment_actor(name)` finds it from a replica. Lifecycle per actor:
MISSING -> STARTING -> READY [-> dead -> STARTING -> READY]*; stopped when no replica of its
version is left (a rolling update keeps the old version's actors until the old replicas are gone)
or when the deployment is deleted. Replicas of a version start only once all its actors are
READY, so a constructor may call `serve.get_deployment_actor`. Liveness is checked every couple
of seconds by looking the name up: a dead actor's name is freed, and the actor is started again
(`max_restarts=0`: the controller, not Core, restarts it, as in Ray). A handle obtained before a
restart points at the dead actor: call `get_deployment_actor` again.
"""

from __future__ import annotations

import asyncio
from typing import Any

import cloudpickle

NAMESPACE = "serve"
CHECK_PERIOD_S = 2.0
MAX_START_FAILURES = 3


def actor_name(app: str, deployment: str, version: str, name: str) -> str:
    return f"SERVE_DEPLOYMENT_ACTOR::{app}#{deployment}#{version}#{name}"


class _Actor:
    def __init__(self, spec: dict, full_name: str) -> None:
        self.spec = spec
        self.full_name = full_name
        self.handle: Any = None
        self.state = "MISSING"  # MISSING | STARTING | READY
        self.failures = 0
        self.error = ""
        self.task: asyncio.Future | None = None


class DeploymentActors:
    """The actors of one deployment, by version."""

    def __init__(self, app: str, deployment: str) -> None:
        self.app = app
        self.deployment = deployment
        self.by_version: dict[str, dict[str, _Actor]] = {}
        self.last_check = 0.0

    def ensure(self, version: str, specs: list[dict]) -> None:
        """Declare the actors the given version needs (idempotent)."""
        have = self.by_version.setdefault(version, {})
        for spec in specs:
            if spec["name"] not in have:
                have[spec["name"]] = _Actor(spec, actor_name(self.app, self.deployment, version, spec["name"]))

    def ready(self, version: str) -> bool:
        return all(a.state == "READY" for a in self.by_version.get(version, {}).values())

    def failed(self, version: str) -> str:
        """A message when an actor of this version cannot be started, else ""."""
        for a in self.by_version.get(version, {}).values():
            if a.failures >= MAX_START_FAILURES:
                return (f"deployment actor {a.spec['name']!r} of deployment {self.deployment!r} failed to start "
                        f"{a.failures} times: {a.error}")
        return ""

    def reconcile(self, versions_in_use: set[str], now: float) -> None:
        """Start missing actors, notice dead ones, stop those of versions no replica uses."""
        import raylite

        for version in list(self.by_version):
            if version not in versions_in_use:
                for a in self.by_version.pop(version).values():
                    _kill(a)
        check = now - self.last_check >= CHECK_PERIOD_S
        if check:
            self.last_check = now
        for actors in self.by_version.values():
            for a in actors.values():
                if a.state == "MISSING" and a.failures < MAX_START_FAILURES:
                    a.state = "STARTING"
                    a.task = asyncio.ensure_future(self._start(a))
                elif a.state == "READY" and check:
                    try:
                        raylite.get_actor(a.full_name, namespace=NAMESPACE)
                    except ValueError:  # its name was freed: it died
                        a.state, a.handle = "MISSING", None

    async def _start(self, a: _Actor) -> None:
        import raylite

        spec = a.spec
        try:
            cls = cloudpickle.loads(spec["serialized_class"])
            opts = {"num_cpus": 0, **spec.get("actor_options", {}), "name": a.full_name, "namespace": NAMESPACE,
                    "lifetime": "detached", "max_restarts": 0}
            try:  # a leftover of an earlier controller: reuse it
                a.handle = raylite.get_actor(a.full_name, namespace=NAMESPACE)
            except ValueError:
                a.handle = cls.options(**opts).remote(*spec.get("init_args", ()), **spec.get("init_kwargs", {}))
            await _wait_ready(a.handle)
            a.state, a.failures, a.error = "READY", 0, ""
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # noqa: BLE001 - reported through the deployment's status
            a.failures += 1
            a.error = f"{type(e).__name__}: {e}"
            _kill(a)
            a.state = "MISSING"

    def stop_all(self) -> None:
        for actors in self.by_version.values():
            for a in actors.values():
                _kill(a)
        self.by_version.clear()


async def _wait_ready(handle: Any, timeout_s: float = 120.0) -> None:
    """Wait until the actor's constructor has run (Ray's built-in `__ray_ready__` call); a
    constructor that raises surfaces here as the actor's death."""
    await asyncio.wait_for(_await(handle.__ray_ready__.remote()), timeout_s)


async def _await(ref: Any) -> Any:
    return await ref


def _kill(a: _Actor) -> None:
    import raylite

    if a.task is not None and not a.task.done():
        a.task.cancel()
    if a.handle is not None:
        try:
            raylite.kill(a.handle, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
    a.handle = None
