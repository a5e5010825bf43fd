"""What the `serve` command line keeps and prints: deployed configs, status YAML, built configs.

`serve deploy` stores each application's config in the cluster's key-value store (namespace
"serve", key `cli_config:<app>`), so `serve config` on any machine prints what was deployed.
`status_dict` turns `serve.status()` into the plain mapping Ray's `serve status` prints;
`build_config` turns applications into the document `serve build` writes.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any

_NAMESPACE = "serve"
_PREFIX = "cli_config:"


def _kv() -> Any:
    from raylite.experimental import internal_kv

    return internal_kv


def config_documents(config: Any) -> dict[str, dict]:
    """Application name -> its section of a deploy config (shared fields plus that app), as
    stored: two equal documents mean the application's config did not change."""
    shared = config.model_dump(mode="json", exclude_unset=True, exclude={"applications"})
    out = {}
    for app in config.applications:
        doc = {**shared, "applications": [app.model_dump(mode="json", exclude_unset=True)]}
        doc["applications"][0].setdefault("name", app.name)
        out[app.name] = doc
    return out


def save_configs(config: Any) -> None:
    """Remember each application's section of a deployed config (and forget dropped apps)."""
    kv = _kv()
    docs = config_documents(config)
    for name, doc in docs.items():
        kv._internal_kv_put(_PREFIX + name, json.dumps(doc), namespace=_NAMESPACE)
    for name in set(load_configs()) - set(docs):
        kv._internal_kv_del(_PREFIX + name, namespace=_NAMESPACE)


def load_configs() -> dict[str, dict]:
    """Application name -> the config document `serve deploy` last sent for it."""
    kv = _kv()
    out = {}
    for key in kv._internal_kv_list(_PREFIX, namespace=_NAMESPACE):
        raw = kv._internal_kv_get(key, namespace=_NAMESPACE)
        if raw is not None:
            out[key.decode()[len(_PREFIX):]] = json.loads(raw)
    return dict(sorted(out.items()))


def clear_configs() -> None:
    _kv()._internal_kv_del(_PREFIX, del_by_prefix=True, namespace=_NAMESPACE)


def _plain(value: Any) -> Any:
    """Enums, dataclasses and pydantic models -> YAML-safe builtins."""
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if hasattr(value, "model_dump"):
        return _plain(value.model_dump(exclude_unset=True))
    if isinstance(value, dict):
        return {str(_plain(k)): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_plain(v) for v in value]
    return value


def _ordered(d: dict, keys: list[str]) -> dict:
    out = {k: d[k] for k in keys if k in d}
    out.update({k: v for k, v in d.items() if k not in out})
    return out


def status_dict(status: Any) -> dict[str, Any]:
    """`serve.status()` -> {proxies, applications: {name: {status, message, last_deployed_time_s,
    deployments: {name: {status, status_trigger, replica_states, message}}}}, target_capacity}."""
    data = _plain(status)
    if not isinstance(data, dict):
        data = {}
    apps = {}
    for name, app in (data.get("applications") or {}).items():
        app = {k: v for k, v in dict(app).items() if k not in ("name", "route_prefix")}
        deployments = {dn: _ordered({k: v for k, v in dict(d).items() if k != "name"},
                                    ["status", "status_trigger", "replica_states", "message"])
                       for dn, d in (app.get("deployments") or {}).items()}
        app["deployments"] = deployments
        apps[name] = _ordered(app, ["status", "message", "last_deployed_time_s", "deployments"])
    return {"proxies": data.get("proxies") or {}, "applications": apps,
            "target_capacity": data.get("target_capacity")}


def deployments_in(app: Any) -> list[Any]:
    """Every Deployment of an application graph (the ingress first), each once."""
    from raylite.serve import Application

    found: dict[str, Any] = {}
    seen: set[int] = set()

    def walk(value: Any) -> None:
        if isinstance(value, Application):
            if id(value) in seen:
                return
            seen.add(id(value))
            found.setdefault(value.deployment.name, value.deployment)
            for arg in (*value._args, *value._kwargs.values()):
                walk(arg)
        elif isinstance(value, (list, tuple, set)):
            for item in value:
                walk(item)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)

    walk(app)
    return list(found.values())


def _explicit_options(deployment: Any) -> dict[str, Any]:
    """The options the code set on a deployment (not Serve's defaults)."""
    options = dict(getattr(deployment, "_options", {}) or {})
    options.pop("name", None)
    return options


def config_overrides(app: Any, app_schema: Any, app_env: dict[str, Any] | None = None) -> dict[str, dict]:
    """A config file's application entry -> `{deployment: options}` for `Application._with_overrides`.

    As in Ray, a config's `ray_actor_options` is merged key by key into the code's, and the
    application's `runtime_env` (`app_env`, default the schema's) applies to every deployment under
    the deployment's own entries.
    """
    code = {d.name: _explicit_options(d) for d in deployments_in(app)}
    overrides = {d.name: d.overrides() for d in app_schema.deployments}
    unknown = sorted(set(overrides) - set(code))
    if unknown:
        raise ValueError(f"the config names deployment(s) {unknown} that the application does not have "
                         f"(it has {sorted(code)})")
    app_env = dict(app_schema.runtime_env or {}) if app_env is None else dict(app_env)
    for name, options in code.items():
        entry = overrides.get(name)
        if entry is None and not app_env:
            continue
        entry = overrides.setdefault(name, {})
        if "ray_actor_options" in entry or app_env:
            actor = {**(options.get("ray_actor_options") or {}), **(entry.get("ray_actor_options") or {})}
            if app_env:
                actor["runtime_env"] = {**app_env, **(actor.get("runtime_env") or {})}
            entry["ray_actor_options"] = actor
    return overrides


def runtime_env_overrides(app: Any, runtime_env: dict[str, Any]) -> dict[str, dict]:
    """`{deployment: {"ray_actor_options": ...}}` giving every deployment `runtime_env` (e.g. the
    `--working-dir` of `serve run`) beneath the keys the deployment sets itself."""
    overrides = {}
    for dep in deployments_in(app):
        actor = dict(_explicit_options(dep).get("ray_actor_options") or {})
        actor["runtime_env"] = {**runtime_env, **(actor.get("runtime_env") or {})}
        overrides[dep.name] = {"ray_actor_options": actor}
    return overrides


def _buildable(options: dict[str, Any]) -> dict[str, Any]:
    """Options as a config file's deployment entry takes them (code-only ones such as `version` go)."""
    from raylite.serve.schema import DeploymentSchema

    options = dict(options)
    if "max_concurrent_queries" in options:  # the old name
        options.setdefault("max_ongoing_requests", options.pop("max_concurrent_queries"))
    return {k: _plain(v) for k, v in options.items() if k in DeploymentSchema.model_fields and k != "name"}


def build_config(apps: list[tuple[str, Any]]) -> dict[str, Any]:
    """[(import_path, app)] -> the config document `serve build` writes."""
    entries = []
    for i, (import_path, app) in enumerate(apps, start=1):
        deployments = [{"name": d.name, **_buildable(_explicit_options(d))} for d in deployments_in(app)]
        entries.append({
            "name": f"app{i}",
            "route_prefix": "/" if len(apps) == 1 else f"/app{i}",
            "import_path": import_path,
            "runtime_env": {},
            "deployments": deployments,
        })
    return {
        "proxy_location": "EveryNode",
        "http_options": {"host": "0.0.0.0", "port": 8000},
        "logging_config": {"encoding": "TEXT", "log_level": "INFO", "logs_dir": None, "enable_access_log": True},
        "applications": entries,
    }
