"""The Serve controller: a detached actor that reconciles applications into replica actors.

Target state (apps and their deployments) and the names of running replicas are checkpointed
to the head's key-value store on every change, so a controller that dies and is restarted by
Core adopts the replicas that still run instead of restarting them; traffic keeps flowing
meanwhile because proxies and handles talk to replicas directly.

Every ~0.1 s the loop: starts/stops replicas toward each deployment's target (rolling updates
for a new version, `reconfigure` in place for a new user_config), polls replica metrics (which
doubles as liveness: a dead replica is replaced within a second), runs health checks every
`health_check_period_s`, autoscales, keeps one proxy per node, and publishes the routes and
replica sets that routers long-poll. Every ~2 s it writes a JSON metrics snapshot to the KV
(namespace "serve", key "snapshot") for the dashboard.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import time
import traceback
import uuid
from typing import Any

from raylite.serve._internal import controller_placement as placement
from raylite.serve._internal import controller_proxies, controller_status
from raylite.serve._internal.controller_actors import DeploymentActors
from raylite.serve._internal.deployment_state import (
    A_DEPLOY_FAILED,
    A_DEPLOYING,
    A_RUNNING,
    A_UNHEALTHY,
    D_DEPLOY_FAILED,
    D_HEALTHY,
    D_UNHEALTHY,
    D_UPDATING,
    RUNNING,
    STARTING,
    STOPPING,
    DeploymentRecord,
    ReplicaRecord,
    gang_size,
    plan,
)

KV_NAMESPACE = "serve"
CHECKPOINT_KEY = "controller_checkpoint"
SNAPSHOT_KEY = "snapshot"
PENDING_FAIL_S = 3.0  # a replica that cannot be placed for this long is checked against capacity


class ServeController:
    """The actor. Its methods are called by `serve.*` in drivers and by routers' long polls."""

    def __init__(self, http_options: dict, proxy_location: str) -> None:
        self.http_options = http_options
        self.proxy_location = proxy_location
        self.apps: dict[str, dict] = {}
        self.deps: dict[tuple[str, str], DeploymentRecord] = {}
        self.published: dict[str, tuple[int, Any]] = {}
        # versions only grow, also across a restart of the controller, so routers that saw the
        # old incarnation's versions accept the new one's values
        self._version = time.time_ns() // 1000
        self._changed = asyncio.Event()
        self.proxies = controller_proxies.ProxyManager(self)
        self.metrics = controller_status.Metrics()
        self.handle_queued: dict[tuple[str, str], dict[str, tuple[float, float]]] = {}
        self.shutting_down = False
        self._replica_classes: dict[tuple[str, str], Any] = {}
        self.app_policies: dict[str, Any] = {}  # app name -> its application-level autoscaling policy
        self._restore()
        self._loop_task = asyncio.get_running_loop().create_task(self._run())

    # ------------------------------------------------------------ checkpoint
    def _checkpoint(self) -> None:
        from raylite.experimental.internal_kv import _internal_kv_put

        state = {"http_options": self.http_options, "proxy_location": self.proxy_location,
                 "apps": self.apps,
                 "replicas": {f"{a}\0{d}": [(r.replica_id, r.actor_name, r.version, r.info, r.started_at)
                                            for r in dep.replicas.values() if r.state in (RUNNING, STARTING)]
                              for (a, d), dep in self.deps.items()}}
        _internal_kv_put(CHECKPOINT_KEY, pickle.dumps(state), namespace=KV_NAMESPACE)

    def _restore(self) -> None:
        import raylite
        from raylite.experimental.internal_kv import _internal_kv_get

        raw = _internal_kv_get(CHECKPOINT_KEY, namespace=KV_NAMESPACE)
        if not raw:
            return
        state = pickle.loads(raw)
        self.http_options = state.get("http_options", self.http_options)
        self.proxy_location = state.get("proxy_location", self.proxy_location)
        for name, app in state["apps"].items():
            self.apps[name] = app
            for dname, target in app["deployments"].items():
                self.deps[(name, dname)] = self._new_record(name, dname, target)
        for key, recs in state["replicas"].items():
            a, d = key.split("\0")
            dep = self.deps.get((a, d))
            if dep is None:
                continue
            for rid, actor_name, version, info, started_at in recs:
                try:
                    actor = raylite.get_actor(actor_name, namespace=KV_NAMESPACE)
                except ValueError:
                    continue
                if not info:
                    raylite.kill(actor)  # it never finished starting: start a fresh one
                    continue
                dep.replicas[rid] = ReplicaRecord(rid, actor_name, version, RUNNING, info, started_at, actor=actor)
        for name in self.apps:
            self._apply_app_policy(name)
        for dep in self.deps.values():
            dep.status = D_HEALTHY if dep.running() else D_UPDATING
            for i, r in enumerate(sorted(dep.replicas.values(), key=lambda r: r.started_at)):
                r.rank = i
            self._publish_replicas(dep)
        self._publish_routes()

    # ------------------------------------------------------------ publishing (long poll)
    def _publish(self, key: str, value: Any) -> None:
        self._version += 1
        self.published[key] = (self._version, value)
        self._changed.set()
        self._changed = asyncio.Event()

    def _publish_replicas(self, dep: DeploymentRecord) -> None:
        cfg = dep.config
        self._publish(f"replicas/{dep.app_name}/{dep.name}", {
            "replicas": [r.public() for r in dep.running()],
            "max_ongoing_requests": cfg.get("max_ongoing_requests", 5),
            "max_queued_requests": cfg.get("max_queued_requests", -1),
            "backpressure": cfg.get("backpressure_config"),
            "failed": dep.status == D_DEPLOY_FAILED, "message": dep.message})

    def _publish_routes(self) -> None:
        # (app, ingress deployment, its max_request_body_size_bytes: the proxy checks bodies as they arrive)
        routes = {app["route_prefix"]: (name, app["ingress"], app["deployments"][app["ingress"]]["config"].get(
                  "max_request_body_size_bytes")) for name, app in self.apps.items() if app.get("route_prefix")}
        self._publish("routes", routes)

    async def listen_for_change(self, versions: dict[str, int], timeout_s: float = 5.0) -> dict:
        """Values of the keys whose version differs from the caller's; waits up to timeout_s for one."""
        deadline = time.monotonic() + timeout_s
        while True:
            out = {}
            for key, seen in versions.items():
                cur = self.published.get(key)
                if cur is None:
                    if seen != 0:
                        out[key] = (0, None) if key.startswith("replicas/") else (0, {})
                elif cur[0] != seen:
                    out[key] = cur
            remaining = deadline - time.monotonic()
            if out or remaining <= 0:
                return out
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except asyncio.TimeoutError:
                return {}

    # ------------------------------------------------------------ API called by serve.*
    async def deploy_application(self, app: dict) -> None:
        """Set an app's target state; replicas follow in the background (rolling update)."""
        name = app["name"]
        from raylite.serve._internal.custom_autoscaling import check_policies

        check_policies(app)  # before any state changes: a policy that cannot load fails the deploy
        for other, existing in self.apps.items():
            if other != name and app.get("route_prefix") and existing.get("route_prefix") == app["route_prefix"]:
                raise ValueError(f"route_prefix {app['route_prefix']!r} is already used by application "
                                 f"{other!r}; choose another route_prefix or delete {other!r} first")
        old = self.apps.get(name)
        self.apps[name] = {**app, "status": A_DEPLOYING, "message": "", "deployed_at": time.time()}
        for dname, target in app["deployments"].items():
            rec = self.deps.get((name, dname))
            if rec is None:
                self.deps[(name, dname)] = self._new_record(name, dname, target)
                continue
            old_uc = rec.config.get("user_config")
            rec.target = target
            rec.status, rec.message, rec.failures = D_UPDATING, "", 0
            rec.target_replicas = self._initial_replicas(target)
            if target["config"].get("autoscaling_config"):
                rec.autoscaler = controller_status.make_autoscaler(target["config"]["autoscaling_config"], rec)
            if old_uc != target["config"].get("user_config"):
                rec.user_config_version += 1
        self._apply_app_policy(name)
        dropped = [d for d in (old or {}).get("deployments", ()) if d not in app["deployments"]]
        # the deployments the new graph drops stop now, all at once, while the new replicas are
        # placed: Core starts each new replica as soon as the old ones free their resources
        stopping = [self._drop_deployment(name, d) for d in dropped]
        self._publish_routes()
        now = time.monotonic()
        for dname in app["deployments"]:  # start replicas now, not at the loop's next turn
            self._reconcile(self.deps[(name, dname)], now)
        self._checkpoint()
        if stopping:
            await asyncio.gather(*stopping)

    def _apply_app_policy(self, name: str) -> None:
        """An app deployed with an application-level autoscaling policy: its autoscaling
        deployments keep metrics for it, and the policy decides for all of them at once."""
        from raylite.serve._internal.custom_autoscaling import CustomPolicyAutoscaler, load_policy

        spec = self.apps[name].get("autoscaling_policy")
        if not spec:
            self.app_policies.pop(name, None)
            return
        self.app_policies[name] = load_policy(spec)
        for dname in self.apps[name]["deployments"]:
            dep = self.deps.get((name, dname))
            cfg = dep.config.get("autoscaling_config") if dep is not None else None
            if cfg:
                dep.autoscaler = CustomPolicyAutoscaler(dict(cfg), name, dname, policy=_decided_by_app)

    def _initial_replicas(self, target: dict) -> int:
        cfg = target["config"]
        auto = cfg.get("autoscaling_config")
        if auto:
            init = auto.get("initial_replicas")
            n = int(init if init is not None else auto.get("min_replicas", 1))
            return placement_round_up(n, target)
        return int(cfg.get("num_replicas") or 0)

    def _new_record(self, app: str, dname: str, target: dict) -> DeploymentRecord:
        rec = DeploymentRecord(app, dname, target)
        rec.target_replicas = self._initial_replicas(target)
        if target["config"].get("autoscaling_config"):
            rec.autoscaler = controller_status.make_autoscaler(target["config"]["autoscaling_config"], rec)
        return rec

    async def delete_application(self, name: str) -> None:
        app = self.apps.pop(name, None)
        if app is None:
            return
        self.app_policies.pop(name, None)
        self._publish_routes()
        await asyncio.gather(*[self._delete_deployment(name, d) for d in app["deployments"]])
        self._checkpoint()

    async def _delete_deployment(self, app: str, dname: str) -> None:
        await self._drop_deployment(app, dname)

    def _drop_deployment(self, app: str, dname: str) -> Any:
        """Forget a deployment now and stop its replicas and actors; returns the awaitable stop."""
        dep = self.deps.pop((app, dname), None)
        if dep is None:
            return asyncio.sleep(0)
        self._publish(f"replicas/{app}/{dname}", None)
        if dep.actors is not None:
            dep.actors.stop_all()
        return asyncio.gather(*[self._stop_replica(dep, r) for r in list(dep.replicas.values())])

    async def wait_for_app(self, name: str, timeout_s: float = 5.0) -> dict:
        """Wait until the app is RUNNING or DEPLOY_FAILED (or timeout); returns {status, message}."""
        deadline = time.monotonic() + timeout_s
        while True:
            app = self.apps.get(name)
            if app is None:
                return {"status": "NOT_STARTED", "message": f"application {name!r} does not exist"}
            if app["status"] in (A_RUNNING, A_DEPLOY_FAILED) or time.monotonic() >= deadline:
                return {"status": app["status"], "message": app["message"]}
            await asyncio.sleep(0.01)

    async def get_status(self) -> dict:
        return controller_status.status_dict(self)

    async def get_rest_details(self) -> dict:
        """Everything the Serve REST API reports (GET /api/serve/applications/)."""
        from raylite.serve._internal.rest_view import rest_view

        return rest_view(self)

    async def list_replicas(self, app: str, dname: str) -> list[dict]:
        """Each replica of a deployment: id, state, node, pid, actor name."""
        dep = self.deps.get((app, dname))
        if dep is None:
            return []
        return [{"replica_id": r.replica_id, "state": r.state, "node_id": r.info.get("node_id"),
                 "pid": r.info.get("pid"), "actor_name": r.actor_name, "model_ids": list(r.model_ids)}
                for r in dep.replicas.values()]

    async def get_app_info(self) -> dict:
        return {name: {"route_prefix": a.get("route_prefix"), "ingress": a["ingress"],
                       "deployments": list(a["deployments"]), "source": a.get("source")}
                for name, a in self.apps.items()}

    async def get_http_options(self) -> dict:
        return {"http_options": self.http_options, "proxy_location": self.proxy_location}

    async def ensure_proxies(self) -> str:
        """Start proxies now; "" or the error (port in use, ...) of the head's proxy."""
        return await self.proxies.reconcile(wait=True)

    async def record_handle_metrics(self, app: str, dname: str, handle_id: str, queued: float) -> None:
        self.handle_queued.setdefault((app, dname), {})[handle_id] = (queued, time.monotonic())
        dep = self.deps.get((app, dname))
        if dep is not None and dep.autoscaler is not None:
            controller_status.record_handle(dep, handle_id, queued)

    async def graceful_shutdown(self) -> None:
        """Delete every app, stop proxies, forget the checkpoint."""
        from raylite.experimental.internal_kv import _internal_kv_del

        self.shutting_down = True
        for name in list(self.apps):
            await self.delete_application(name)
        await self.proxies.stop_all()
        _internal_kv_del(CHECKPOINT_KEY, namespace=KV_NAMESPACE)
        _internal_kv_del(SNAPSHOT_KEY, namespace=KV_NAMESPACE)

    async def ping(self) -> bool:
        return True

    # ------------------------------------------------------------ reconciliation
    async def _run(self) -> None:
        last_metrics = last_snapshot = last_proxies = 0.0
        while not self.shutting_down:
            now = time.monotonic()
            try:
                for dep in list(self.deps.values()):
                    self._reconcile(dep, now)
                self._update_app_statuses()
                if now - last_metrics >= 0.5:
                    last_metrics = now
                    for dep in list(self.deps.values()):
                        for r in dep.running():
                            if not r.polling:
                                r.polling = True
                                asyncio.ensure_future(self._poll_replica(dep, r, now))
                        if dep.app_name not in self.app_policies:
                            controller_status.autoscale(self, dep, now)
                    for app_name in list(self.app_policies):
                        controller_status.autoscale_app(self, app_name, now)
                if now - last_proxies >= 2.0:
                    last_proxies = now
                    asyncio.ensure_future(self.proxies.reconcile(wait=False))
                if now - last_snapshot >= 2.0:
                    last_snapshot = now
                    asyncio.ensure_future(controller_status.write_snapshot(self))
            except Exception:  # noqa: BLE001 - the loop must survive any one bad record
                traceback.print_exc()
            await asyncio.sleep(0.05)

    def _reconcile(self, dep: DeploymentRecord, now: float) -> None:
        if dep.status == D_DEPLOY_FAILED:
            return
        to_start, to_stop = plan(dep)
        for r in to_stop:
            asyncio.ensure_future(self._stop_replica(dep, r))
        actors_ready = self._actors_ready(dep, now)  # also notices dead actors and restarts them
        if to_start and actors_ready:
            size = gang_size(dep)
            for _ in range(to_start // size):
                self._start_gang(dep, now, size)
        for r in dep.running():
            if r.user_config_version != dep.user_config_version and r.version == dep.version:
                r.user_config_version = dep.user_config_version
                asyncio.ensure_future(self._reconfigure(dep, r))
        if dep.status != D_DEPLOY_FAILED:
            ready = [r for r in dep.running() if r.version == dep.version]
            others = [r for r in dep.live() if r.version != dep.version or r.state != RUNNING]
            if len(ready) >= dep.target_replicas and not others:
                if dep.status != D_HEALTHY:
                    dep.status, dep.message = D_HEALTHY, ""
            elif dep.status == D_HEALTHY:
                dep.status = D_UPDATING

    def _actors_ready(self, dep: DeploymentRecord, now: float) -> bool:
        """Start (or check) the deployment's actors; replicas of a version wait for its actors."""
        specs = dep.target.get("deployment_actors") or []
        if not specs and dep.actors is None:
            return True
        if dep.actors is None:
            dep.actors = DeploymentActors(dep.app_name, dep.name)
        if specs:
            dep.actors.ensure(dep.version, specs)
        in_use = {r.version for r in dep.replicas.values()} | {dep.version}
        dep.actors.reconcile(in_use, now)
        problem = dep.actors.failed(dep.version)
        if problem:
            dep.status, dep.message = D_DEPLOY_FAILED, problem
            self._publish_replicas(dep)
            return False
        return dep.actors.ready(dep.version)

    def _start_gang(self, dep: DeploymentRecord, now: float, size: int) -> None:
        """Start one replica, or for gang scheduling one gang of `size` replicas sharing a group."""
        gang = placement.new_gang(dep) if size > 1 else None
        for i in range(size):
            rec = self._start_replica(dep, now, gang_id=gang.gang_id if gang else "", gang_rank=i)
            if gang is not None:
                gang.members.append(rec.replica_id)

    def _start_replica(self, dep: DeploymentRecord, now: float, gang_id: str = "", gang_rank: int = 0) -> ReplicaRecord:
        from raylite.serve._internal import replica as replica_mod

        rid = f"{dep.app_name}#{dep.name}#{uuid.uuid4().hex[:6]}"
        actor_name = f"SERVE_REPLICA::{rid}"
        rec = ReplicaRecord(rid, actor_name, dep.version, STARTING, started_at=now,
                            user_config_version=dep.user_config_version, gang_id=gang_id, gang_rank=gang_rank,
                            rank=placement.lowest_free_rank(dep))
        dep.replicas[rid] = rec
        asyncio.ensure_future(self._launch(dep, rec, replica_mod))
        return rec

    def _replica_config(self, dep: DeploymentRecord, rec: ReplicaRecord) -> dict:
        """The config a replica starts with: the deployment's, plus who it is (rank, gang, version)."""
        cfg = dict(dep.target["config"])
        info = placement.rank_info(dep, rec)
        rec.rank_sent = dict(info)
        cfg["_replica"] = {**info, "version": dep.version, "gang": placement.gang_context(dep, rec),
                           "custom_autoscaling": controller_status.wants_custom_metrics(dep)}
        return cfg

    async def _launch(self, dep: DeploymentRecord, rec: ReplicaRecord, replica_mod: Any) -> None:
        import raylite

        target = dep.target
        opts = dict(target.get("ray_actor_options") or {})
        opts.setdefault("num_cpus", 1)
        try:
            cls = self._replica_classes.get((dep.app_name, dep.name))
            if cls is None:  # one exported class per deployment, not one per replica
                cls = raylite.remote(replica_mod.replica_class(dep.app_name, dep.name))
                self._replica_classes[(dep.app_name, dep.name)] = cls
            actor_opts = {"name": rec.actor_name, "namespace": KV_NAMESPACE, "lifetime": "detached",
                          "max_concurrency": 1000, **opts}
            strategy = await placement.scheduling_strategy(self, dep, rec)
            if strategy is not None:
                actor_opts["scheduling_strategy"] = strategy
            if rec.state != STARTING:
                return  # stopped while its placement was reserved
            rec.actor = cls.options(**actor_opts).remote(dep.app_name, dep.name, rec.replica_id,
                                                         target["definition"], target["init_args"],
                                                         self._replica_config(dep, rec))
            self._checkpoint()
            init = asyncio.ensure_future(_await_ref(rec.actor.initialize.remote()))
            while not init.done():
                await asyncio.wait([init], timeout=0.5)
                if not init.done() and rec.state == STARTING:
                    problem = controller_status.infeasible_message(self, dep, rec)
                    if problem:
                        init.cancel()
                        raise _Unplaceable(problem)
            rec.info = init.result()
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # noqa: BLE001
            if rec.state == STOPPING:
                return
            self._replica_failed(dep, rec, e)
            return
        if rec.state != STARTING or dep.replicas.get(rec.replica_id) is not rec:
            return  # stopped while starting
        rec.state = RUNNING
        dep.failures = 0
        self._publish_replicas(dep)
        self._checkpoint()

    def _replica_failed(self, dep: DeploymentRecord, rec: ReplicaRecord, error: BaseException) -> None:
        import raylite

        dep.replicas.pop(rec.replica_id, None)
        if rec.actor is not None:
            try:
                raylite.kill(rec.actor)
            except Exception:  # noqa: BLE001
                pass
        placement.release_replica_pg(rec)
        if rec.gang_id:  # a gang starts together or not at all: its other members go too
            for r in placement.gang_members(dep, rec.gang_id):
                asyncio.ensure_future(self._stop_replica(dep, r))
            placement.release_gang_if_empty(dep, rec.gang_id)
        msg = str(error)
        dep.failures += 1
        if isinstance(error, _Unplaceable) or not dep.running() or dep.failures >= 3:
            dep.status = D_DEPLOY_FAILED
            dep.message = (f"The deployment {dep.name!r} of application {dep.app_name!r} failed to start a "
                           f"replica:\n{msg}")
            for r in list(dep.replicas.values()):
                asyncio.ensure_future(self._stop_replica(dep, r))
            self._publish_replicas(dep)
        self._checkpoint()

    async def _stop_replica(self, dep: DeploymentRecord, rec: ReplicaRecord) -> None:
        import raylite

        if rec.state == STOPPING:
            return
        was_running = rec.state == RUNNING
        rec.state = STOPPING
        if was_running and dep.replicas.get(rec.replica_id) is rec:
            self._publish_replicas(dep)
        cfg = dep.config
        if rec.actor is not None and was_running:
            try:
                await asyncio.wait_for(_await_ref(rec.actor.prepare_for_shutdown.remote(
                    cfg.get("graceful_shutdown_wait_loop_s", 2.0), cfg.get("graceful_shutdown_timeout_s", 20.0))),
                    cfg.get("graceful_shutdown_timeout_s", 20.0) + 5.0)
            except BaseException:  # noqa: BLE001 - it is going away either way
                pass
        if rec.actor is not None:
            try:
                raylite.kill(rec.actor)
            except Exception:  # noqa: BLE001
                pass
        if dep.replicas.get(rec.replica_id) is rec:
            del dep.replicas[rec.replica_id]
        placement.release_replica_pg(rec)
        if rec.gang_id:
            placement.release_gang_if_empty(dep, rec.gang_id)
        if dep.autoscaler is not None:
            controller_status.drop_replica(dep, rec.replica_id)
        if not self.shutting_down:
            self._checkpoint()

    async def _reconfigure(self, dep: DeploymentRecord, rec: ReplicaRecord) -> None:
        try:
            await _await_ref(rec.actor.reconfigure.remote(dep.config.get("user_config")))
        except BaseException as e:  # noqa: BLE001
            dep.status, dep.message = D_UNHEALTHY, f"reconfigure() of replica {rec.replica_id} raised: {e}"

    async def _poll_replica(self, dep: DeploymentRecord, rec: ReplicaRecord, now: float) -> None:
        """Metrics every poll; a health check every health_check_period_s. Failure -> replace."""
        try:
            await self._poll_once(dep, rec, now)
        finally:
            rec.polling = False

    async def _poll_once(self, dep: DeploymentRecord, rec: ReplicaRecord, now: float) -> None:
        cfg = dep.config
        try:
            m = await asyncio.wait_for(_await_ref(rec.actor.get_metrics.remote()), 10.0)
            self.metrics.add(dep, rec, m)
            rec.ongoing = m["ongoing"]
            if m.get("model_ids", []) != rec.model_ids:
                rec.model_ids = m.get("model_ids", [])
                self._publish_replicas(dep)
            if dep.autoscaler is not None:
                controller_status.record_replica(dep, rec.replica_id, m["ongoing"], m.get("autoscaling_stats"))
            info = placement.rank_info(dep, rec)
            if info != rec.rank_sent:  # its node's rank or the world size changed
                rec.rank_sent = info
                await _await_ref(rec.actor.update_rank.remote(info))
            if now - rec.last_health >= cfg.get("health_check_period_s", 10.0):
                rec.last_health = now
                await asyncio.wait_for(_await_ref(rec.actor.check_health.remote()),
                                       cfg.get("health_check_timeout_s", 30.0))
            rec.health_failures = 0
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # noqa: BLE001
            if rec.state != RUNNING:
                return
            rec.health_failures += 1
            # a dead actor or a check_health() that raised: replace now; a slow one: after 3 misses
            if not isinstance(e, asyncio.TimeoutError) or rec.health_failures >= 3:
                why = "died" if _is_actor_dead(e) else "failed its health check"
                dep.message = f"replica {rec.replica_id} {why} and is being replaced: {str(e)[:500]}"
                if rec.gang_id:  # RESTART_GANG: the whole gang goes, and a new one takes its place
                    dep.message += f" (with the rest of its gang {rec.gang_id})"
                    await asyncio.gather(*[self._stop_replica(dep, r) for r in placement.gang_members(dep, rec.gang_id)])
                else:
                    await self._stop_replica(dep, rec)

    def _update_app_statuses(self) -> None:
        for name, app in self.apps.items():
            deps = [self.deps.get((name, d)) for d in app["deployments"]]
            deps = [d for d in deps if d is not None]
            failed = [d for d in deps if d.status == D_DEPLOY_FAILED]
            if failed:
                status, message = A_DEPLOY_FAILED, "\n".join(d.message for d in failed)
            elif all(d.status == D_HEALTHY for d in deps):
                status, message = A_RUNNING, ""
            elif app["status"] in (A_RUNNING, A_UNHEALTHY) and any(d.status == D_UNHEALTHY for d in deps):
                status, message = A_UNHEALTHY, "\n".join(d.message for d in deps if d.message)
            elif app["status"] == A_RUNNING and all(d.running() for d in deps):
                status, message = A_RUNNING, ""
            else:
                status, message = A_DEPLOYING, app.get("message", "")
            app["status"], app["message"] = status, message


_Unplaceable = placement.Unplaceable


def _decided_by_app(ctx: Any) -> Any:
    raise RuntimeError("this deployment is scaled by its application's autoscaling policy")


def placement_round_up(n: int, target: dict) -> int:
    """A replica count rounded up to whole gangs (gang-scheduled deployments)."""
    g = target["config"].get("gang_scheduling_config")
    size = int(g["gang_size"]) if g else 1
    return -(-n // size) * size if n > 0 else 0


async def _await_ref(ref: Any) -> Any:
    return await ref


def _is_actor_dead(e: BaseException) -> bool:
    from raylite.exceptions import RayActorError

    return isinstance(e, RayActorError)


def dumps_snapshot(snapshot: dict) -> bytes:
    return json.dumps(snapshot, default=str).encode()
