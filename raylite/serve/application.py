"""`@serve.deployment`, `Deployment`, `Application` and `@serve.ingress`.

A `Deployment` is a spec (what the user asked for: the class or function and its options);
`.bind(*args)` makes an `Application` node; an Application passed to another's `bind` becomes a
`DeploymentHandle` in that replica's constructor. `build_app` flattens a graph into the
controller's target-state dicts (pickled code and arguments, so the controller never imports
user code).
"""

from __future__ import annotations

import hashlib
import inspect
import weakref
from collections.abc import Callable
from typing import Any

import cloudpickle

from raylite.serve._internal import options as _opts

_ACTOR_OPTION_KEYS = {"accelerator_type", "memory", "num_cpus", "num_gpus", "object_store_memory", "resources",
                      "runtime_env", "label_selector"}
_CONFIG_KEYS = {"num_replicas", "max_ongoing_requests", "max_queued_requests", "user_config",
                "graceful_shutdown_wait_loop_s", "graceful_shutdown_timeout_s", "health_check_period_s",
                "health_check_timeout_s", "autoscaling_config", "logging_config", "backpressure_config",
                "gang_scheduling_config", "max_constructor_retry_count", "rolling_update_percentage",
                "max_surge_percent", "max_request_body_size_bytes"}
_OTHER_KEYS = {"name", "version", "ray_actor_options", "placement_group_bundles", "placement_group_strategy",
               "placement_group_bundle_label_selector", "max_replicas_per_node", "route_prefix",
               "max_concurrent_queries", "request_router_config", "deployment_actors"}


class _Default:
    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT: Any = _Default()


class Deployment:
    """A deployment spec: the user's class or function plus Serve options. Immutable; `options()`
    returns a changed copy."""

    def __init__(self, func_or_class: Any, name: str, options: dict) -> None:
        self.func_or_class = func_or_class
        self._name = name
        self._options = options  # every option that was set explicitly, validated
        self._config = _make_config(options)

    # Ray's read-only properties
    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> str | None:
        return self._options.get("version")

    @property
    def num_replicas(self) -> int | str:
        return self._options.get("num_replicas", 1)

    @property
    def max_ongoing_requests(self) -> int:
        return self._config["max_ongoing_requests"]

    @property
    def max_queued_requests(self) -> int:
        return self._config["max_queued_requests"]

    @property
    def user_config(self) -> Any:
        return self._config["user_config"]

    @property
    def ray_actor_options(self) -> dict | None:
        return self._options.get("ray_actor_options")

    @property
    def autoscaling_config(self) -> Any:
        """The AutoscalingConfig (pydantic model), or None."""
        from raylite.serve.config import AutoscalingConfig

        cfg = self._config["autoscaling_config"]
        return None if cfg is None else AutoscalingConfig(**cfg)

    @property
    def route_prefix(self) -> str | None:
        return self._options.get("route_prefix")

    @property
    def logging_config(self) -> Any:
        """The LoggingConfig (pydantic model), or None."""
        from raylite.serve.config import LoggingConfig

        cfg = self._config["logging_config"]
        return None if cfg is None else LoggingConfig(**cfg)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"Deployment {self._name!r} cannot be constructed directly; use "
                           f"{self._name}.bind(...) and serve.run(app)")

    def bind(self, *args: Any, **kwargs: Any) -> Application:
        """An application node: this deployment with its constructor arguments."""
        return Application(self, args, kwargs)

    def options(self, _func_or_class: Any = None, **options: Any) -> Deployment:
        """A copy with some options replaced (same names as `@serve.deployment`)."""
        _check_keys(options)
        merged = {**self._options, **{k: v for k, v in options.items() if v is not DEFAULT}}
        if "num_replicas" in options and options["num_replicas"] is not DEFAULT and \
                "autoscaling_config" not in options and options["num_replicas"] != "auto":
            merged.pop("autoscaling_config", None)
        name = merged.pop("name", None) or self._name
        merged["name"] = name
        _validate(merged)
        return Deployment(_func_or_class or self.func_or_class, name, merged)

    def __repr__(self) -> str:
        return f"Deployment(name={self._name!r})"


def _check_keys(options: dict) -> None:
    unknown = set(options) - _CONFIG_KEYS - _OTHER_KEYS
    if unknown:
        raise TypeError(f"unknown deployment option(s) {sorted(unknown)}; valid options are "
                        f"{sorted(_CONFIG_KEYS | _OTHER_KEYS)}")


def _validate(options: dict) -> None:
    nr = options.get("num_replicas")
    if nr is not None and nr != "auto" and (not isinstance(nr, int) or isinstance(nr, bool) or nr < 0):
        raise ValueError(f"num_replicas must be a non-negative int or 'auto', not {nr!r}")
    if isinstance(nr, int) and options.get("autoscaling_config") is not None:
        raise ValueError("Manually setting num_replicas is not allowed when autoscaling_config is provided; "
                         "drop num_replicas (or use num_replicas='auto')")
    rao = options.get("ray_actor_options")
    if rao is not None:
        if not isinstance(rao, dict):
            raise TypeError(f"ray_actor_options must be a dict, not {type(rao).__name__}")
        bad = set(rao) - _ACTOR_OPTION_KEYS
        if bad:
            raise ValueError(f"ray_actor_options has invalid key(s) {sorted(bad)}; valid keys are "
                             f"{sorted(_ACTOR_OPTION_KEYS)}")
    bundles = options.get("placement_group_bundles")
    if bundles is not None and (not isinstance(bundles, list) or not all(isinstance(b, dict) for b in bundles)):
        raise TypeError("placement_group_bundles must be a list of resource dicts, e.g. [{'CPU': 1}]")
    strategy = options.get("placement_group_strategy")
    if strategy is not None and strategy not in ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"):
        raise ValueError(f"placement_group_strategy must be PACK, SPREAD, STRICT_PACK or STRICT_SPREAD, "
                         f"not {strategy!r}")
    if strategy is not None and bundles is None:
        raise ValueError("placement_group_strategy needs placement_group_bundles as well")
    _opts.max_replicas_per_node(options.get("max_replicas_per_node"), bundles)
    if options.get("deployment_actors") is not None:
        options["deployment_actors"] = _opts.deployment_actors(options["deployment_actors"])
    _make_config(options)


def _make_config(options: dict) -> dict:
    return _opts.deployment_config(options)


def deployment(_func_or_class: Any = None, *, name: Any = DEFAULT, version: Any = DEFAULT,
               num_replicas: Any = DEFAULT, route_prefix: Any = DEFAULT, ray_actor_options: Any = DEFAULT,
               placement_group_bundles: Any = DEFAULT, placement_group_strategy: Any = DEFAULT,
               placement_group_bundle_label_selector: Any = DEFAULT,
               max_replicas_per_node: Any = DEFAULT, user_config: Any = DEFAULT,
               max_ongoing_requests: Any = DEFAULT, max_queued_requests: Any = DEFAULT,
               backpressure_config: Any = DEFAULT,
               autoscaling_config: Any = DEFAULT, graceful_shutdown_wait_loop_s: Any = DEFAULT,
               graceful_shutdown_timeout_s: Any = DEFAULT, health_check_period_s: Any = DEFAULT,
               health_check_timeout_s: Any = DEFAULT, logging_config: Any = DEFAULT,
               request_router_config: Any = DEFAULT, max_constructor_retry_count: Any = DEFAULT,
               gang_scheduling_config: Any = DEFAULT, deployment_actors: Any = DEFAULT,
               rolling_update_percentage: Any = DEFAULT, max_surge_percent: Any = DEFAULT,
               **unknown: Any) -> Any:
    """Turn a class or function into a Serve `Deployment` (bare or with options)."""
    if unknown:
        _check_keys(unknown)
    given = {k: v for k, v in dict(
        name=name, version=version, num_replicas=num_replicas, route_prefix=route_prefix,
        ray_actor_options=ray_actor_options, placement_group_bundles=placement_group_bundles,
        placement_group_strategy=placement_group_strategy, max_replicas_per_node=max_replicas_per_node,
        user_config=user_config, max_ongoing_requests=max_ongoing_requests,
        max_queued_requests=max_queued_requests, autoscaling_config=autoscaling_config,
        graceful_shutdown_wait_loop_s=graceful_shutdown_wait_loop_s,
        graceful_shutdown_timeout_s=graceful_shutdown_timeout_s, health_check_period_s=health_check_period_s,
        health_check_timeout_s=health_check_timeout_s, logging_config=logging_config,
        placement_group_bundle_label_selector=placement_group_bundle_label_selector,
        backpressure_config=backpressure_config, request_router_config=request_router_config,
        max_constructor_retry_count=max_constructor_retry_count, gang_scheduling_config=gang_scheduling_config,
        deployment_actors=deployment_actors, rolling_update_percentage=rolling_update_percentage,
        max_surge_percent=max_surge_percent).items()
        if v is not DEFAULT}
    given.update(unknown)
    _validate(given)

    def wrap(target: Any) -> Deployment:
        if not (inspect.isclass(target) or callable(target)):
            raise TypeError(f"@serve.deployment must decorate a class or a function, not {type(target).__name__}")
        dname = given.get("name") or getattr(target, "__name__", "deployment")
        return Deployment(target, dname, {**given, "name": dname})

    if _func_or_class is not None:
        if isinstance(_func_or_class, Deployment):
            raise TypeError("@serve.deployment applied twice")
        return wrap(_func_or_class)
    return wrap


class Application:
    """A bound deployment (and, through its arguments, the graph below it)."""

    def __init__(self, deployment: Deployment, args: tuple, kwargs: dict) -> None:
        self._deployment = deployment
        self._args = args
        self._kwargs = kwargs

    @property
    def deployment(self) -> Deployment:
        return self._deployment

    def __repr__(self) -> str:
        return f"Application({self._deployment.name!r})"

    def _with_overrides(self, overrides: dict[str, dict]) -> Application:
        """A copy of the graph where deployment `name` gets `options` (`{name: {option: value}}`),
        e.g. from a config file's `deployments:` list. Unknown deployment names raise ValueError."""
        seen: set[str] = set()
        memo: dict[int, Application] = {}

        def walk(app: Application) -> Application:
            if id(app) in memo:
                return memo[id(app)]
            dep = app._deployment
            seen.add(dep.name)
            if dep.name in overrides:
                opts = dict(overrides[dep.name])
                opts.pop("name", None)
                dep = dep.options(**opts)
            new = Application(dep, _map_apps(app._args, walk), _map_apps(app._kwargs, walk))
            memo[id(app)] = new
            return new

        out = walk(self)
        missing = set(overrides) - seen
        if missing:
            raise ValueError(f"config overrides name deployment(s) {sorted(missing)} that are not in the "
                             f"application (it has {sorted(seen)})")
        return out


def _map_apps(value: Any, fn: Callable[[Application], Any]) -> Any:
    if isinstance(value, Application):
        return fn(value)
    if isinstance(value, tuple):
        return tuple(_map_apps(v, fn) for v in value)
    if isinstance(value, list):
        return [_map_apps(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: _map_apps(v, fn) for k, v in value.items()}
    return value


def ingress(app: Any = None) -> Callable[..., type]:
    """`@serve.ingress(app)`: the class's replica serves HTTP through an ASGI app, as in Ray:

    - a FastAPI app: routes declared on the class's methods run against the replica's instance;
    - any other ASGI app, used as is;
    - a function returning an ASGI app (a factory): called in each replica after the class is
      constructed, so the app is built there (FastAPI plugins, middleware and exception handlers
      that do not survive pickling work, and `Depends(serve.get_deployment_handle)` resolves);
    - nothing: the class defines `__serve_build_asgi_app__(self)` returning the app.

    `serve.ingress(app)()` (no class) makes a class that only serves the app.
    """

    def wrap(cls: type | None = None) -> type:
        if cls is None:
            cls = _default_ingress_class()
        if not inspect.isclass(cls):
            raise ValueError("@serve.ingress must decorate a class (put it under @serve.deployment)")
        if any("__call__" in vars(c) for c in cls.__mro__[:-1]):
            raise ValueError("Classes passed to @serve.ingress may not have a __call__ method: HTTP requests "
                             "go to the ASGI app's routes")
        if app is None and not hasattr(cls, "__serve_build_asgi_app__"):
            raise ValueError(f"serve.ingress() without an app needs {cls.__name__} to define "
                             "__serve_build_asgi_app__(self) returning an ASGI app")
        _INGRESS[cls] = app
        return cls

    return wrap


def _default_ingress_class() -> type:
    class ASGIIngressDeployment:
        """The class `serve.ingress(app)()` makes: it holds its bind arguments and serves the app."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.args = args
            self.kwargs = kwargs

    return ASGIIngressDeployment


_INGRESS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _definition(target: Any) -> bytes:
    """The pickled code a replica runs. An ingress class travels with a recipe of its ASGI app
    (FastAPI apps with compiled routes do not survive pickling); the replica rebuilds the app."""
    if not (inspect.isclass(target) and target in _INGRESS):
        return cloudpickle.dumps(target)
    app = _INGRESS[target]
    from raylite.serve._internal.ingress import app_recipe, dumps

    return dumps(("__serve_ingress__", target, app_recipe(app)))


def build_app(app: Application, app_name: str) -> tuple[dict[str, dict], str]:
    """Flatten a graph into {deployment name: target dict} and the ingress deployment's name."""
    from raylite.serve.handle import DeploymentHandle

    if not isinstance(app, Application):
        if isinstance(app, Deployment):
            raise TypeError(f"serve.run() needs a bound application: call {app.name}.bind(...) first")
        raise TypeError(f"serve.run() needs an Application (Deployment.bind(...)), not {type(app).__name__}")
    targets: dict[str, dict] = {}
    names: dict[int, str] = {}

    def visit(node: Application) -> DeploymentHandle:
        if id(node) in names:
            return DeploymentHandle(names[id(node)], app_name)
        dep = node._deployment
        name = dep.name
        i = 1
        while name in targets:
            name = f"{dep.name}_{i}"
            i += 1
        names[id(node)] = name
        targets[name] = {}  # reserve the name before children take theirs
        args = _map_apps(node._args, visit)
        kwargs = _map_apps(node._kwargs, visit)
        targets[name] = _target(dep, name, args, kwargs)
        return DeploymentHandle(name, app_name)

    ingress_handle = visit(app)
    return targets, ingress_handle.deployment_name


def _target(dep: Deployment, name: str, args: tuple, kwargs: dict) -> dict:
    definition = _definition(dep.func_or_class)
    try:
        init_args = cloudpickle.dumps((args, kwargs))
    except Exception as e:
        raise TypeError(f"the arguments bound to deployment {name!r} cannot be serialized: {e}") from None
    config = dict(dep._config)
    opts = dep._options
    actors = opts.get("deployment_actors") or []
    code_hash = hashlib.sha1(definition + init_args + repr((
        sorted((opts.get("ray_actor_options") or {}).items()), opts.get("placement_group_bundles"),
        opts.get("placement_group_strategy"), opts.get("version"), opts.get("max_replicas_per_node"),
        config.get("logging_config"), config.get("gang_scheduling_config"))).encode()
        + b"".join(a["serialized_class"] for a in actors)).hexdigest()[:16]
    return {"name": name, "definition": definition, "init_args": init_args, "config": config,
            "ray_actor_options": opts.get("ray_actor_options") or {},
            "placement_group_bundles": opts.get("placement_group_bundles"),
            "placement_group_strategy": opts.get("placement_group_strategy"),
            "max_replicas_per_node": opts.get("max_replicas_per_node"),
            "deployment_actors": actors,
            "version": opts.get("version") or code_hash, "route_prefix": opts.get("route_prefix")}
