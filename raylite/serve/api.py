"""`serve.run`, `serve.start`, `serve.status`, `serve.delete`, `serve.shutdown` and handle lookups.

These run in the driver (or the CLI) and talk to the controller actor with Core calls; the
request path never goes through here.
"""

from __future__ import annotations

import time
from typing import Any

from raylite.serve._internal import client as _client
from raylite.serve._internal import options as _opts
from raylite.serve._internal.status_types import ServeStatus
from raylite.serve.application import DEFAULT, Application, build_app
from raylite.serve.context import _get_internal_replica_context
from raylite.serve.exceptions import RayServeException
from raylite.serve.handle import DeploymentHandle

DEFAULT_APP_NAME = "default"


def _ensure_core() -> None:
    import raylite

    if not raylite.is_initialized():
        raylite.init()


def _require_http_dependencies() -> None:
    """Fail in the caller, naming the install, before any proxy starts without its HTTP parser."""
    try:
        import httptools  # noqa: F401
    except ImportError:
        raise ImportError("Serve's HTTP proxy needs the 'httptools' package, which the plain "
                          "raylite install leaves out: pip install 'raylite[serve]' (or use "
                          "proxy_location='Disabled' to serve through handles only)") from None


def _controller_or_none() -> Any:
    try:
        return _client.get_controller()
    except ValueError:
        return None


def start(detached: bool = True, http_options: Any = None, proxy_location: Any = None,
          grpc_options: Any = None, logging_config: Any = None, **kwargs: Any) -> None:
    """Start Serve on the cluster (controller and HTTP proxies); a no-op if it already runs.

    `http_options`: a dict or `HTTPOptions` (host, port, request_timeout_s, keep_alive_timeout_s,
    root_path, ...). `logging_config` (a dict or `LoggingConfig`, Ray's setting for Serve's own
    components) is checked and accepted; raylite's controller and proxies log to the session's
    log files. Raises OSError naming the port when the head's proxy cannot listen.
    """
    import raylite

    _opts.logging_config(logging_config)  # a bad field fails here, naming it
    given = dict(_opts._as_dict(http_options, "http_options"))
    for legacy in ("http_host", "http_port"):
        if legacy in kwargs:
            given[legacy[5:]] = kwargs.pop(legacy)
    if kwargs:
        raise TypeError(f"serve.start() got unexpected argument(s) {sorted(kwargs)}")
    opts = _opts.http_options(given)
    location = _opts.proxy_location(proxy_location) if proxy_location is not None else opts["location"]
    if location != "Disabled":
        _require_http_dependencies()
    _ensure_core()
    existed = _controller_or_none() is not None
    controller = _get_or_create_controller(opts, location, http_options is not None)
    error = raylite.get(controller.ensure_proxies.remote())
    if error:
        if not existed:
            shutdown()  # leave no half-started Serve behind, so a retry on another port works
        raise OSError(error)


def _get_or_create_controller(opts: dict, location: str, explicit: bool) -> Any:
    import raylite

    controller = _controller_or_none()
    if controller is None:
        from raylite.serve._internal.controller import ServeController

        http = {k: v for k, v in opts.items() if k not in ("middlewares", "location")}
        cls = raylite.remote(ServeController)
        try:
            return cls.options(name=_client.CONTROLLER_NAME, namespace=_client.SERVE_NAMESPACE,
                               lifetime="detached", num_cpus=0, max_concurrency=1000, max_restarts=-1,
                               max_task_retries=-1).remote(http, location)
        except ValueError:  # another driver created it meanwhile
            return _client.get_controller()
    if explicit:
        have = raylite.get(controller.get_http_options.remote())["http_options"]
        if (opts["host"], opts["port"]) != (have.get("host"), have.get("port")):
            raise RayServeException(
                f"Serve is already running with HTTP on {have.get('host')}:{have.get('port')}; it cannot move to "
                f"{opts['host']}:{opts['port']} while running. Call serve.shutdown() first.")
    return controller


def _http_from_host_port(host: str | None, port: int | None) -> dict | None:
    if host is None and port is None:
        return None
    out: dict = {}
    if host is not None:
        out["host"] = host
    if port is not None:
        out["port"] = int(port)
    return out


def run(target: Application, blocking: bool = False, name: str = DEFAULT_APP_NAME,
        route_prefix: str | None = DEFAULT, logging_config: Any = None,
        _local_testing_mode: bool = False, *, host: str | None = None, port: int | None = None,
        timeout_s: float | None = None, _autoscaling_policy: Any = None,
        _wait_for_running: bool = True) -> DeploymentHandle:
    """Deploy an application and wait until it is RUNNING; returns a handle to its ingress.

    `host`/`port` (the form in older Ray docs) set the HTTP proxy's address when Serve starts.
    `_autoscaling_policy` is an application-level policy (a config file's `autoscaling_policy`):
    one function of every autoscaling deployment's context deciding all their replica counts.
    Raises RuntimeError with the replica's traceback when a replica fails to start.
    `_wait_for_running=False` returns once the controller has the application (the Serve REST
    API's declarative deploy: its status then tells DEPLOYING, RUNNING or DEPLOY_FAILED).
    """
    import raylite

    if not isinstance(name, str) or not name:
        raise ValueError(f"application name must be a non-empty str, not {name!r}")
    if _local_testing_mode:
        from raylite.serve._internal.local_mode import run_local

        return run_local(target, name)
    app_dict = _build(target, name, route_prefix, logging_config)
    if _autoscaling_policy is not None:
        app_dict["autoscaling_policy"] = _opts.autoscaling_policy(_autoscaling_policy)
    _ensure_core()
    http = _http_from_host_port(host, port)
    existed = _controller_or_none() is not None
    if not existed:  # this run starts Serve, and with it an HTTP proxy on every node
        _require_http_dependencies()
    controller = _get_or_create_controller(_opts.http_options(http or {}), "EveryNode", http is not None)
    # proxies start while the replicas do
    proxies_ref = controller.ensure_proxies.remote()
    raylite.get(controller.deploy_application.remote(app_dict))
    proxy_error = raylite.get(proxies_ref)
    if proxy_error:
        if not existed:
            shutdown()
        raise OSError(proxy_error)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while _wait_for_running:
        st = raylite.get(controller.wait_for_app.remote(name, 2.0))
        if st["status"] == "RUNNING":
            break
        if st["status"] == "DEPLOY_FAILED":
            raise RuntimeError(f"Deploying application {name!r} failed:\n{st['message']}")
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"application {name!r} is not RUNNING after {timeout_s}s (status "
                               f"{st['status']}: {st['message']})")
    handle = DeploymentHandle(app_dict["ingress"], name)
    if blocking:
        try:
            while True:
                time.sleep(1.0)
        except KeyboardInterrupt:
            shutdown()
    return handle


def _build(target: Application, name: str, route_prefix: Any, logging_config: Any) -> dict:
    deployments, ingress = build_app(target, name)
    if route_prefix is DEFAULT:
        route_prefix = deployments[ingress].get("route_prefix") or "/"
    if route_prefix is not None:
        if not isinstance(route_prefix, str) or not route_prefix.startswith("/"):
            raise ValueError(f"route_prefix must start with '/', got {route_prefix!r}")
        if len(route_prefix) > 1 and route_prefix.endswith("/"):
            route_prefix = route_prefix.rstrip("/")
        if "{" in route_prefix or "}" in route_prefix:
            raise ValueError(f"route_prefix may not contain wildcards: {route_prefix!r}")
    if logging_config is not None:
        lc = _opts.logging_config(logging_config)
        for t in deployments.values():
            if t["config"].get("logging_config") is None:
                t["config"]["logging_config"] = lc
    return {"name": name, "route_prefix": route_prefix, "ingress": ingress, "deployments": deployments}


def status() -> ServeStatus:
    """Ray's ServeStatus: applications, their deployments and replica states, and proxies."""
    import raylite

    controller = _controller_or_none()
    if controller is None:
        return ServeStatus.from_dict({"proxies": {}, "applications": {}, "target_capacity": None})
    return ServeStatus.from_dict(raylite.get(controller.get_status.remote()))


def delete(name: str, _blocking: bool = True) -> None:
    """Delete an application (its replicas stop gracefully); a no-op when it does not exist."""
    import raylite

    controller = _controller_or_none()
    if controller is None:
        return
    ref = controller.delete_application.remote(name)
    if _blocking:
        raylite.get(ref)


def shutdown() -> None:
    """Delete every application, stop the proxies and the controller."""
    import raylite
    from raylite.serve._internal.local_mode import shutdown_local

    if shutdown_local() or not raylite.is_initialized():
        _client.reset()
        return
    controller = _controller_or_none()
    if controller is not None:
        try:
            raylite.get(controller.graceful_shutdown.remote(), timeout=60)
        except Exception:  # noqa: BLE001 - kill it regardless
            pass
        try:
            raylite.kill(controller, no_restart=True)
        except Exception:  # noqa: BLE001
            pass
        deadline = time.monotonic() + 10.0  # wait until the name is free, so serve.start() gets a new one
        while _controller_or_none() is not None and time.monotonic() < deadline:
            time.sleep(0.02)
    _client.reset()


def get_app_handle(name: str) -> DeploymentHandle:
    """A handle to the ingress deployment of a running application."""
    import raylite

    controller = _controller_or_none()
    apps = raylite.get(controller.get_app_info.remote()) if controller is not None else {}
    if name not in apps:
        raise RayServeException(f"Application {name!r} does not exist; running applications: {sorted(apps)}")
    return DeploymentHandle(apps[name]["ingress"], name)


def get_deployment_handle(deployment_name: str, app_name: str | None = None, _check_exists: bool = True,
                          _record_telemetry: bool = True) -> DeploymentHandle:
    """A handle to any deployment; `app_name` defaults to the calling replica's app (or "default")."""
    import raylite

    if app_name is None:
        ctx = _get_internal_replica_context()
        app_name = ctx.app_name if ctx is not None else DEFAULT_APP_NAME
    if _check_exists:
        controller = _controller_or_none()
        apps = raylite.get(controller.get_app_info.remote()) if controller is not None else {}
        if app_name not in apps or deployment_name not in apps[app_name]["deployments"]:
            raise RayServeException(f"Deployment {deployment_name!r} in application {app_name!r} does not exist")
    return DeploymentHandle(deployment_name, app_name)


def get_deployment_actor(actor_name: str) -> Any:
    """A handle to one of the calling replica's deployment-scoped actors (`deployment_actors=`).

    Raises RayServeException outside a replica, and ValueError while the actor does not exist
    (not declared, not started yet, or being restarted after it died: call again shortly).
    """
    import raylite
    from raylite.serve._internal.controller_actors import NAMESPACE
    from raylite.serve._internal.controller_actors import actor_name as full_name

    ctx = _get_internal_replica_context()
    if ctx is None:
        raise RayServeException("`serve.get_deployment_actor()` may only be called from within a Serve replica")
    name = full_name(ctx.app_name, ctx.deployment, ctx._version, actor_name)
    try:
        return raylite.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        raise ValueError(f"deployment actor {actor_name!r} of deployment {ctx.deployment!r} (app {ctx.app_name!r}) "
                         "does not exist: it is not in the deployment's deployment_actors, or it is being "
                         "(re)started; call serve.get_deployment_actor() again shortly") from None


def get_replica_context() -> Any:
    """The calling replica's ReplicaContext (app_name, deployment, replica_tag, servable_object)."""
    ctx = _get_internal_replica_context()
    if ctx is None:
        raise RayServeException("`serve.get_replica_context()` may only be called from within a Serve "
                                "deployment's replica")
    return ctx
