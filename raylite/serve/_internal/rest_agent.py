"""The Serve REST API's worker: a driver on the cluster that the head's HTTP server asks to
deploy, describe and shut down Serve (`python -m raylite.serve._internal.rest_agent`).

Why a separate process: the HTTP server (raylite/dashboard, L6) talks to the head only
through protocol messages and is no driver, while Serve is driven only through the public
API (L7). So the server starts this process on the first `/api/serve/` request and keeps it:
it joins the cluster as a driver (RAYLITE_ADDRESS, RAYLITE_TOKEN from the server) and answers
one JSON request per line on stdin with one JSON reply per line on the pipe it was given.
Its own stdout is redirected to stderr, so nothing a library prints can corrupt a reply.

Requests: {"id", "op": "details", "api_type"} -> Ray's ServeInstanceDetails;
{"id", "op": "deploy", "config"} -> a ServeDeploySchema applied declaratively;
{"id", "op": "delete"} -> Serve shut down. Replies: {"id", "status": HTTP status, "body" | "error"}.

A PUT answers as soon as the config is valid and Serve runs, as Ray's does: each changed
application is imported and deployed by a task (with the application's runtime_env, so a
`working_dir` is importable there) while GET shows it DEPLOYING, then RUNNING or DEPLOY_FAILED
with the reason. An application whose config is the same as the one deployed is left alone,
so re-sending a config restarts no replica (KubeRay re-sends it every reconcile).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any

import raylite
from raylite.api import env_address
from raylite.serve._internal import rest_details
from raylite.serve._internal.client import CONTROLLER_NAME, SERVE_NAMESPACE

# how long a PUT or DELETE waits for the previous PUT's deploy tasks (imports can be slow)
BUILD_WAIT_S = 30.0


class RequestError(Exception):
    """The request cannot be applied as sent (HTTP 400); the message says why."""


@dataclass
class _Build:
    """An application being imported and deployed by a task (or whose task failed)."""

    ref: Any
    started_s: float
    config: dict
    error: str = ""


def _local_uri(value: Any) -> Any:
    """Ray's `local://PATH` (a directory present on every node) as the path raylite ships."""
    if isinstance(value, str) and value.startswith("local://"):
        return value[len("local://"):]
    return value


def _check_runtime_env(name: str, runtime_env: dict) -> dict:
    """As in Ray, a config sent over HTTP names code by URI (the client's disk is not here)."""
    env = dict(runtime_env or {})
    uris = list(env.get("py_modules") or [])
    if env.get("working_dir"):
        uris.append(env["working_dir"])
    for uri in uris:
        if not isinstance(uri, str) or "://" not in uri:
            raise RequestError(f"application {name!r}: runtime_env working_dir/py_modules {uri!r} must be a URI "
                               "(a package URI, or local:///path for a directory that exists on the head); a "
                               "path on the client's machine cannot be read by the cluster")
    if "working_dir" in env:
        env["working_dir"] = _local_uri(env["working_dir"])
    if "py_modules" in env:
        env["py_modules"] = [_local_uri(m) for m in env["py_modules"]]
    return env


def _fetch_remote(env: dict) -> dict:
    """http(s) .zip URIs in working_dir / py_modules as local directories (see remote_uris)."""
    from raylite.serve._internal import remote_uris

    env = dict(env)
    if remote_uris.is_remote(env.get("working_dir")):
        env["working_dir"] = remote_uris.fetch(env["working_dir"])
    if env.get("py_modules"):
        env["py_modules"] = [remote_uris.fetch(m) if remote_uris.is_remote(m) else m for m in env["py_modules"]]
    return env


def capacity_adjusted(num: int, target_capacity: float | None) -> int:
    """Ray's rule: scale by target_capacity %, round half up, never below 1 unless it is 0."""
    if target_capacity is None or target_capacity == 100 or num == 0:
        return num
    if target_capacity == 0:
        return 0
    return max(1, int(num * target_capacity / 100 + 0.5))


def _apply_target_capacity(app: Any, overrides: dict[str, dict], target_capacity: float | None) -> None:
    """Every deployment's replica counts (fixed or autoscaling bounds) scaled by target_capacity."""
    from raylite.serve._cli_state import deployments_in

    if target_capacity is None:
        return
    for dep in deployments_in(app):
        entry = overrides.setdefault(dep.name, {})
        auto = entry.get("autoscaling_config")
        if auto is None and dep.autoscaling_config is not None:
            auto = dep.autoscaling_config.model_dump()
        if auto:
            auto = dict(auto)
            for key in ("min_replicas", "max_replicas", "initial_replicas"):
                if isinstance(auto.get(key), int):
                    auto[key] = capacity_adjusted(auto[key], target_capacity)
            entry["autoscaling_config"] = auto
            continue
        num = entry.get("num_replicas", dep.num_replicas)
        if isinstance(num, int):
            entry["num_replicas"] = capacity_adjusted(num, target_capacity)


@raylite.remote(num_cpus=0, max_retries=0)
def build_and_deploy(app_config: dict, target_capacity: float | None) -> str:
    """Runs in a task with the application's runtime_env: import, apply the config, hand it to
    the controller (not waiting for replicas: their progress is the application's status)."""
    from raylite import serve
    from raylite.serve._cli_state import config_overrides
    from raylite.serve._internal.app_loader import load_application
    from raylite.serve.schema import ServeApplicationSchema

    schema = ServeApplicationSchema.model_validate(app_config)
    app = load_application(schema.import_path, schema.args, app_dir=os.getcwd())
    shipped = dict(raylite.get_runtime_context().runtime_env or {})  # working_dir as a package
    overrides = config_overrides(app, schema, app_env=shipped)
    _apply_target_capacity(app, overrides, target_capacity)
    if overrides:
        app = app._with_overrides(overrides)
    serve.run(app, name=schema.name, route_prefix=schema.route_prefix, blocking=False,
              _autoscaling_policy=schema.autoscaling_policy, _wait_for_running=False)
    return schema.name


class RestAgent:
    def __init__(self) -> None:
        self.builds: dict[str, _Build] = {}
        self.broken = False

    # ------------------------------------------------------------------ helpers
    def _controller(self) -> Any:
        try:
            return raylite.get_actor(CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
        except ValueError:
            return None

    def _settle_builds(self, timeout_s: float = 0) -> None:
        """Collect finished deploy tasks: a failure is kept (DEPLOY_FAILED) until the next PUT.
        With `timeout_s`, first wait that long for the running ones: a PUT or DELETE waits for the
        previous PUT's tasks (they only import and hand over, so this is short), or a late one
        would deploy an older config, or Serve again after a DELETE."""
        pending = [b for b in self.builds.values() if b.ref is not None]
        if not pending:
            return
        ready, _ = raylite.wait([b.ref for b in pending], num_returns=len(pending), timeout=timeout_s)
        for name, build in list(self.builds.items()):
            if build.ref is None or not any(build.ref == r for r in ready):
                continue
            try:
                raylite.get(build.ref)
            except Exception as e:  # noqa: BLE001 - the user's import or constructor may raise anything
                build.error = _reason(e)
                build.ref = None
                continue
            del self.builds[name]

    # ------------------------------------------------------------------ ops
    def details(self, api_type: str | None) -> dict:
        from raylite.serve._cli_state import load_configs

        self._settle_builds()
        controller = self._controller()
        base = raylite.get(controller.get_rest_details.remote(), timeout=30) if controller else None
        failed = {n: b.error for n, b in self.builds.items() if b.error}
        building = {n: b.started_s for n, b in self.builds.items() if not b.error}
        return rest_details.instance_details(base, load_configs(), building, failed, api_type)

    def deploy(self, raw: Any) -> None:
        from raylite import serve
        from raylite.serve import _cli_state
        from raylite.serve.schema import ServeConfigError, parse_config

        try:
            config = parse_config(raw, source="ServeDeploySchema")
        except ServeConfigError as e:
            raise RequestError(str(e)) from None
        envs = {a.name: _check_runtime_env(a.name, a.runtime_env) for a in config.applications}
        self._start_serve(config)
        stored = _cli_state.load_configs()
        wanted = _cli_state.config_documents(config)
        self._settle_builds(timeout_s=BUILD_WAIT_S)
        running = set(self._app_names())
        for app in config.applications:
            doc = wanted[app.name]
            unchanged = json.dumps(stored.get(app.name), sort_keys=True) == json.dumps(doc, sort_keys=True)
            if unchanged and (app.name in running or app.name in self.builds):
                continue
            self._start_build(app.name, app.model_dump(mode="json", exclude_unset=True), envs[app.name],
                              config.target_capacity)
        for stale in sorted((running | set(self.builds)) - set(wanted)):
            self.builds.pop(stale, None)
            serve.delete(stale, _blocking=False)
        _cli_state.save_configs(config)

    def _start_build(self, name: str, app_config: dict, env: dict, target_capacity: float | None) -> None:
        app_config.setdefault("name", name)
        try:
            env = _fetch_remote(env)
            task = build_and_deploy.options(runtime_env=env) if env else build_and_deploy
            ref = task.remote(app_config, target_capacity)
        except Exception as e:  # noqa: BLE001 - e.g. a working_dir that cannot be shipped
            self.builds[name] = _Build(None, time.time(), app_config, error=_reason(e))
            return
        self.builds[name] = _Build(ref, time.time(), app_config)

    def _start_serve(self, config: Any) -> None:
        from raylite import serve
        from raylite.serve.exceptions import RayServeException

        if self._controller() is not None:
            return  # as in Ray, the HTTP options of a running Serve stay as they are
        try:
            serve.start(http_options=config.http_options.model_dump(), proxy_location=config.proxy_location)
        except (RayServeException, OSError, ValueError) as e:
            raise RequestError(f"Serve could not start with this config's http_options: {e}") from None

    def _app_names(self) -> list[str]:
        from raylite import serve

        if self._controller() is None:
            return []
        return list(serve.status().applications)

    def delete(self) -> None:
        from raylite import serve
        from raylite.serve import _cli_state

        self._settle_builds(timeout_s=BUILD_WAIT_S)
        self.builds.clear()
        if self._controller() is not None:
            serve.shutdown()
        _cli_state.clear_configs()

    def handle(self, request: dict) -> dict:
        op = request.get("op")
        try:
            if op == "details":
                return {"status": 200, "body": self.details(request.get("api_type"))}
            if op == "deploy":
                self.deploy(request.get("config"))
                return {"status": 200, "body": None}
            if op == "delete":
                self.delete()
                return {"status": 200, "body": None}
        except RequestError as e:
            return {"status": 400, "error": str(e)}
        except Exception as e:  # noqa: BLE001 - reported to the HTTP client as a 500
            traceback.print_exc()
            # a lost link to the cluster (e.g. the head restarted): exit after this reply, and the
            # server starts a fresh agent on the next request
            self.broken = isinstance(e, (ConnectionError, OSError)) or not raylite.is_initialized()
            return {"status": 500, "error": f"{type(e).__name__}: {e}"}
        return {"status": 400, "error": f"unknown op {op!r}"}


def _reason(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text if len(text) < 20000 else text[-20000:]


def main() -> None:
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever prints goes to the log, never into a reply
    sys.stdout = sys.stderr
    # an internal namespace: job lists leave this driver out (Serve names its own namespace)
    raylite.init(address=env_address(("RAYLITE_ADDRESS",)) or "auto", namespace="_raylite_internal_serve",
                 log_to_driver=False)
    agent = RestAgent()
    for line in sys.stdin:
        try:
            request = json.loads(line)
        except ValueError:
            continue
        if not isinstance(request, dict):
            continue
        reply = agent.handle(request)
        reply["id"] = request.get("id")
        replies.write(json.dumps(reply, default=str) + "\n")
        if agent.broken:
            return


if __name__ == "__main__":
    main()
