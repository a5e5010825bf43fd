"""The `serve` command line (Ray's `serve run/deploy/status/config/build/shutdown/start`).

Installed as the `serve` console script and as `raylite serve ...`. Every command is a thin shell
over the public Serve API (`serve.start`, `serve.run`, `serve.status`, `serve.delete`,
`serve.shutdown`) plus three helpers: the config schema (`raylite.serve.schema`), the import-path
loader (`raylite.serve._internal.app_loader`) and `_cli_state`, which keeps the configs deployed by
`serve deploy` in the cluster's key-value store so `serve config` can print them.

Cluster address: `--address` (HOST:PORT), else RAYLITE_ADDRESS/RAY_ADDRESS, else the cluster that
`raylite start` left running on this machine. `serve run` starts a local cluster when there is none;
the other commands need one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import traceback
from typing import Any

import click
import yaml

from raylite.cli.extras import ExtrasGroup

_HELP = {"help_option_names": ["-h", "--help"]}


def _fail(message: str) -> None:
    click.echo(f"Error: {message}", err=True)
    sys.exit(1)


class _Interrupted(BaseException):  # noqa: N818 - like KeyboardInterrupt, which `except Exception` must not stop
    """SIGTERM, treated like Ctrl-C."""


# ------------------------------------------------------------------- connecting to the cluster


def _connect(address: str | None, *, must_exist: bool) -> None:
    import raylite

    if raylite.is_initialized():
        return
    from raylite.api import env_address

    address = address or env_address() or None
    if address is None and must_exist:
        address = "auto"
    try:
        raylite.init(address=address, namespace="serve", log_to_driver=True)
    except (ConnectionError, RuntimeError, ValueError, OSError) as e:
        where = f"at {address!r}" if address not in (None, "auto") else "on this machine"
        _fail(f"could not connect to a raylite cluster {where}: {e}\nStart one with `raylite start --head` "
              "or pass --address HOST:PORT.")


def _serve() -> Any:
    from raylite import serve

    return serve


# ------------------------------------------------------------------------- building apps


def _load(import_path: str, args: dict[str, Any], app_dir: str) -> Any:
    from raylite.serve._internal.app_loader import ImportPathError, load_application

    try:
        return load_application(import_path, args, app_dir=app_dir)
    except (ImportPathError, TypeError, ValueError) as e:
        _fail(str(e))


def _apply_config(app: Any, app_schema: Any) -> Any:
    """A config file's per-deployment overrides onto the app (its runtime_env comes once connected)."""
    from raylite.serve._cli_state import config_overrides

    try:
        overrides = config_overrides(app, app_schema, app_env={})
        return app._with_overrides(overrides) if overrides else app
    except (KeyError, ValueError, TypeError) as e:
        _fail(f"application {app_schema.name!r} in the config: {e}")


def _load_config(path: str) -> Any:
    from raylite.serve.schema import ServeConfigError, parse_config_file

    try:
        return parse_config_file(path)
    except ServeConfigError as e:
        _fail(str(e))


def _is_config_file(target: str) -> bool:
    return target.endswith((".yaml", ".yml", ".json"))


def _serve_is_running() -> bool:
    import raylite
    from raylite.serve._internal.client import CONTROLLER_NAME, SERVE_NAMESPACE

    try:
        raylite.get_actor(CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
    except ValueError:
        return False
    return True


def _http_options(config: Any | None, host: str | None, port: int | None) -> dict[str, Any] | None:
    """HTTP options for serve.start: flags over the config file's. A file without `http_options`
    means Ray's config defaults (0.0.0.0:8000) for a new Serve instance, and leaves a running one as
    it is."""
    options: dict[str, Any] = {}
    if config is not None and ("http_options" in config.model_fields_set or not _serve_is_running()):
        options.update(config.http_options.model_dump())
    if host is not None:
        options["host"] = host
    if port is not None:
        options["port"] = port
    return options or None


def _start_or_fail(kwargs: dict[str, Any]) -> None:
    """serve.start(**kwargs), or one line saying why not (never a traceback)."""
    from raylite.serve.exceptions import RayServeException

    try:
        _serve().start(**kwargs)
    except RayServeException as e:  # e.g. Serve already runs with other HTTP options
        _fail(f"{e} From the command line: `serve shutdown -y` stops Serve and its applications "
              "(then deploy again); or ask for the HTTP options it runs with (`serve status`).")
    except (OSError, ValueError, RuntimeError, ImportError) as e:
        _fail(str(e))


def _start_serve(config: Any | None, host: str | None, port: int | None) -> None:
    kwargs: dict[str, Any] = {}
    http_options = _http_options(config, host, port)
    if http_options:
        kwargs["http_options"] = http_options
    if config is not None and "proxy_location" in config.model_fields_set:
        kwargs["proxy_location"] = config.proxy_location
    _start_or_fail(kwargs)


def _deploy_app(app: Any, name: str, route_prefix: str | None, autoscaling_policy: Any = None) -> None:
    serve = _serve()
    try:
        serve.run(app, name=name, route_prefix=route_prefix, blocking=False, _autoscaling_policy=autoscaling_policy)
    except Exception as e:  # noqa: BLE001 - the user's constructor may raise anything
        _fail(f"application {name!r} failed to deploy: {type(e).__name__}: {e}")


def _load_config_apps(config: Any, app_dir: str) -> list[tuple[Any, Any]]:
    """Import every application of a config first: a typo fails before anything is deployed."""
    return [(a, _apply_config(_load(a.import_path, a.args, app_dir), a)) for a in config.applications]


def _apply_runtime_envs(apps: list[tuple[Any, Any]], job_env: dict[str, Any]) -> list[tuple[Any, Any]]:
    """Each app's runtime_env (over the job's), shipped from here so a working_dir on this machine
    reaches replicas on any node, given to every deployment of the app."""
    from raylite.remote_function import merge_runtime_env

    out = []
    for app_schema, app in apps:
        try:
            own = merge_runtime_env(None, app_schema.runtime_env) if app_schema.runtime_env else {}
        except (ValueError, TypeError) as e:
            _fail(f"application {app_schema.name!r}: runtime_env: {e}")
        env = {**job_env, **own}
        out.append((app_schema, _with_runtime_env(app, env, app_schema.name) if env else app))
    return out


def _deploy_config(config: Any | None, apps: list[tuple[Any, Any]], host: str | None = None,
                   port: int | None = None) -> list[str]:
    """Start Serve (HTTP options from the file `config`, if any, and the flags), deploy each app."""
    _start_serve(config, host, port)
    base = _http_base_url()
    for app_schema, app in apps:
        _deploy_app(app, app_schema.name, app_schema.route_prefix, app_schema.autoscaling_policy)
        if app_schema.route_prefix is None:
            click.echo(f"Deployed app {app_schema.name!r} (no route prefix: reachable through handles only).")
        elif base:
            click.echo(f"Deployed app {app_schema.name!r}: ready at {base}{app_schema.route_prefix}")
        else:
            click.echo(f"Deployed app {app_schema.name!r} at route prefix {app_schema.route_prefix!r}.")
    return [a.name for a, _ in apps]


def _http_base_url() -> str:
    """http://HOST:PORT of the running proxies ("" when unknown); 0.0.0.0 shown as 127.0.0.1."""
    import raylite
    from raylite.serve._internal.client import CONTROLLER_NAME, SERVE_NAMESPACE

    try:
        controller = raylite.get_actor(CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
        options = raylite.get(controller.get_http_options.remote(), timeout=10)["http_options"]
        host = options.get("host") or "127.0.0.1"
        host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        return f"http://{host}:{options['port']}"
    except Exception:  # noqa: BLE001 - only a convenience for the message
        return ""


# --------------------------------------------------------------------------- the commands


@click.group(name="serve", cls=ExtrasGroup, context_settings=_HELP)
def main() -> None:
    """Run and manage Ray Serve applications on a raylite cluster."""
    import importlib.util

    # every command reads Serve's config models: say so before connecting to a cluster
    if importlib.util.find_spec("pydantic") is None:
        raise ModuleNotFoundError("No module named 'pydantic'", name="pydantic")


@main.command(context_settings=_HELP)
@click.argument("config_or_import_path")
@click.argument("arguments", nargs=-1)
@click.option("--address", "-a", default=None, help="Cluster to run on (HOST:PORT or 'auto'); default: "
              "the one running here, else a new local cluster.")
@click.option("--host", default=None, help="HTTP host to listen on (default 127.0.0.1).")
@click.option("--port", "-p", type=int, default=None, help="HTTP port to listen on (default 8000).")
@click.option("--route-prefix", default=None, help="Route prefix of the application (default '/').")
@click.option("--name", default=None, help="Application name (default 'default').")
@click.option("--app-dir", "-d", default=".", show_default=True,
              help="Directory to import the application from (put on sys.path).")
@click.option("--working-dir", default=None, help="Directory shipped to every replica and used as "
              "its working directory (runtime_env working_dir).")
@click.option("--runtime-env-json", default=None, help="A runtime_env for every replica, as JSON, e.g. "
              "'{\"env_vars\": {\"MODE\": \"prod\"}}'.")
@click.option("--blocking/--non-blocking", default=True, show_default=True,
              help="Stay in the foreground until Ctrl-C (which deletes the apps).")
@click.option("--reload", is_flag=True, help="Watch --app-dir (and --working-dir) and redeploy on changes "
              "(for development).")
def run(config_or_import_path: str, arguments: tuple[str, ...], address: str | None, host: str | None,
        port: int | None, route_prefix: str | None, name: str | None, app_dir: str, working_dir: str | None,
        runtime_env_json: str | None, blocking: bool, reload: bool) -> None:
    """Run an application (`module:app [key=value ...]`) or a config file, and block.

    Replica logs stream to this terminal. Ctrl-C deletes the applications (and stops the local
    cluster if this command started one).
    """
    from_file = _is_config_file(config_or_import_path)
    if from_file:
        if arguments:
            _fail("key=value application arguments go in the config file's 'args', not on the command line")
        if name is not None or route_prefix is not None:
            _fail("--name and --route-prefix apply to an import path; a config file sets them per app")
        config = _load_config(config_or_import_path)
    else:
        config = _config_for_import_path(config_or_import_path, arguments, name, route_prefix)
    apps = _load_config_apps(config, app_dir)  # import errors surface before any cluster starts
    runtime_env = _runtime_env_option(runtime_env_json, working_dir)
    _connect_for_run(address, runtime_env)
    # replicas are created by the controller, not by this driver: each deployment gets the env itself
    shipped = _shipped_runtime_env() if runtime_env else {}
    apps = _apply_runtime_envs(apps, shipped)
    names = [a.name for a in config.applications]
    previous = signal.signal(signal.SIGTERM, _raise_interrupted)
    outcome = "failed"
    # snapshot before deploying: an edit saved while the first deploy runs must trigger a reload
    watcher = _Watcher([d for d in (app_dir, working_dir) if d]) if reload and blocking else None
    try:
        _deploy_config(config if from_file else None, apps, host, port)
        outcome = "deployed"
        if blocking:
            while True:  # replica logs stream to this terminal meanwhile
                time.sleep(1.0)
                if watcher is not None and watcher.changed():
                    _redeploy(config, app_dir, shipped)
    except (KeyboardInterrupt, _Interrupted):
        click.echo("Got interrupted, shutting down Serve...", err=True)
        outcome = "interrupted"
    finally:
        signal.signal(signal.SIGTERM, previous)
        if outcome != "deployed" or blocking:
            _tear_down(names, shutdown_serve=outcome == "interrupted")


def _config_for_import_path(import_path: str, arguments: tuple[str, ...], name: str | None,
                            route_prefix: str | None) -> Any:
    """`serve run module:app k=v --name N --route-prefix P` as a one-application config."""
    from pydantic import ValidationError

    from raylite.serve._internal.app_loader import parse_builder_args
    from raylite.serve.schema import (
        ServeApplicationSchema,
        ServeDeploySchema,
        format_validation_error,
    )

    try:
        args = parse_builder_args(arguments)
    except ValueError as e:
        _fail(str(e))
    try:
        app = ServeApplicationSchema(name=name or "default", import_path=import_path, args=args,
                                     route_prefix=route_prefix if route_prefix is not None else "/")
    except ValidationError as e:
        _fail(format_validation_error(e, "command line"))
    return ServeDeploySchema(applications=[app])


class _Watcher:
    """Notices changed, added or removed files under some directories (`serve run --reload`)."""

    _MAX_FILES = 5000

    def __init__(self, roots: list[str]) -> None:
        self._roots = [os.path.abspath(r) for r in roots]
        self._seen = self._snapshot()

    def _snapshot(self) -> dict[str, tuple[float, int]]:
        out: dict[str, tuple[float, int]] = {}
        for root in self._roots:
            for folder, dirs, files in os.walk(root):
                dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
                for f in files:
                    path = os.path.join(folder, f)
                    with contextlib.suppress(OSError):
                        st = os.stat(path)
                        out[path] = (st.st_mtime, st.st_size)
                    if len(out) >= self._MAX_FILES:
                        return out
        return out

    def changed(self) -> bool:
        now = self._snapshot()
        changed, self._seen = now != self._seen, now
        return changed


def _redeploy(config: Any, app_dir: str, job_env: dict[str, Any]) -> None:
    """Re-import the applications and roll them out; a broken edit keeps the running version."""
    from raylite.serve._internal.app_loader import forget_local_modules

    click.echo("Files changed: redeploying...", err=True)
    forget_local_modules(app_dir)
    try:
        apps = _apply_runtime_envs(_load_config_apps(config, app_dir), job_env)
        for app_schema, app in apps:
            _deploy_app(app, app_schema.name, app_schema.route_prefix, app_schema.autoscaling_policy)
    except (SystemExit, Exception) as e:  # noqa: BLE001 - an edit may break anything; keep serving what runs
        if not isinstance(e, SystemExit):  # _fail has printed its reason already
            click.echo("".join(traceback.format_exception_only(type(e), e)).rstrip(), err=True)
        click.echo("Redeploy failed; the previous version keeps serving. Fix the code and save again.", err=True)
        return
    click.echo("Redeployed.", err=True)


def _runtime_env_option(runtime_env_json: str | None, working_dir: str | None) -> dict | None:
    import json

    env: dict[str, Any] = {}
    if runtime_env_json:
        try:
            env = json.loads(runtime_env_json)
        except json.JSONDecodeError as e:
            _fail(f"--runtime-env-json is not valid JSON: {e}")
        if not isinstance(env, dict):
            _fail("--runtime-env-json must be a JSON object such as '{\"env_vars\": {\"A\": \"1\"}}'")
    if working_dir:
        if not os.path.isdir(working_dir):
            _fail(f"--working-dir {working_dir!r} is not a directory")
        env["working_dir"] = os.path.abspath(working_dir)
    return env or None


def _shipped_runtime_env() -> dict[str, Any]:
    """The job's runtime_env as the cluster holds it (a working_dir already uploaded as a package)."""
    import raylite

    return dict(raylite.get_runtime_context().runtime_env)


def _with_runtime_env(app: Any, runtime_env: dict[str, Any], app_name: str) -> Any:
    from raylite.serve._cli_state import runtime_env_overrides

    try:
        return app._with_overrides(runtime_env_overrides(app, runtime_env))
    except (KeyError, ValueError, TypeError) as e:
        _fail(f"application {app_name!r}: cannot apply the runtime_env: {e}")


def _connect_for_run(address: str | None, runtime_env: dict | None) -> None:
    import raylite
    from raylite.api import env_address

    address = address or env_address() or None
    try:
        raylite.init(address=address, namespace="serve", runtime_env=runtime_env, log_to_driver=True)
    except (ConnectionError, RuntimeError, ValueError, OSError) as e:
        _fail(f"could not start or join a raylite cluster: {e}")


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise _Interrupted()


def _tear_down(names: list[str], shutdown_serve: bool) -> None:
    """Ctrl-C: shut Serve down (as Ray's `serve run` does). A failed deploy: delete only the apps
    this command tried to deploy. Then disconnect (a local cluster started here stops)."""
    import raylite

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not leave a half-stopped app
    try:
        if shutdown_serve:
            _serve().shutdown()
        else:
            for app_name in names:
                with contextlib.suppress(Exception):
                    _serve().delete(app_name)
    finally:
        raylite.shutdown()
        signal.signal(signal.SIGINT, signal.SIG_DFL)


@main.command(context_settings=_HELP)
@click.argument("config_file_name")
@click.option("--address", "-a", default=None, help="Cluster to deploy to (HOST:PORT); default: the one "
              "running on this machine.")
@click.option("--app-dir", "-d", default=".", show_default=True,
              help="Directory to import the applications from.")
def deploy(config_file_name: str, address: str | None, app_dir: str) -> None:
    """Deploy the applications of a config file to a running cluster, declaratively.

    Applications in the file are created or updated (a changed one rolls its replicas); running
    applications that the file no longer lists are deleted.
    """
    from raylite.serve import _cli_state

    config = _load_config(config_file_name)
    apps = _load_config_apps(config, app_dir)
    _connect(address, must_exist=True)
    apps = _apply_runtime_envs(apps, {})
    before = set(_app_statuses())
    names = _deploy_config(config, apps)
    for stale in sorted(before - set(names)):
        click.echo(f"Deleting app {stale!r}: the config no longer lists it.")
        _serve().delete(stale)
    _cli_state.save_configs(config)
    click.echo("Sent deploy request successfully.")


def _app_statuses() -> dict[str, Any]:
    try:
        status = _serve().status()
    except Exception:  # noqa: BLE001 - Serve not started: no applications
        return {}
    return dict(getattr(status, "applications", {}) or {})


@main.command(context_settings=_HELP)
@click.option("--address", "-a", default=None, help="Cluster to ask (HOST:PORT).")
@click.option("--name", "-n", default=None, help="Only this application.")
def status(address: str | None, name: str | None) -> None:
    """Print the status of Serve's proxies, applications and deployments, as YAML."""
    from raylite.serve._cli_state import status_dict

    _connect(address, must_exist=True)
    try:
        data = status_dict(_serve().status())
    except Exception as e:  # noqa: BLE001 - no Serve instance yet: an empty status, as Ray prints
        if "not running" not in str(e).lower() and "no serve" not in str(e).lower():
            raise
        data = {"proxies": {}, "applications": {}, "target_capacity": None}
    if name is not None:
        apps = data["applications"]
        if name not in apps:
            _fail(f"no application named {name!r}; running: {sorted(apps) or 'none'}")
        click.echo(yaml.safe_dump(apps[name], sort_keys=False), nl=False)
        return
    click.echo(yaml.safe_dump(data, sort_keys=False), nl=False)


@main.command(context_settings=_HELP)
@click.option("--address", "-a", default=None, help="Cluster to ask (HOST:PORT).")
@click.option("--name", "-n", default=None, help="Only this application.")
def config(address: str | None, name: str | None) -> None:
    """Print the config last deployed with `serve deploy`, one YAML document per application."""
    from raylite.serve import _cli_state

    _connect(address, must_exist=True)
    configs = _cli_state.load_configs()
    running = _app_statuses()
    docs = [c for n, c in configs.items() if (name is None or n == name) and n in running]
    if not docs:
        if name is not None:
            _fail(f"no config deployed with `serve deploy` for application {name!r}")
        click.echo("No configuration was deployed with `serve deploy` on this cluster.")
        return
    click.echo(yaml.safe_dump_all(docs, sort_keys=False), nl=False)


@main.command(context_settings=_HELP)
@click.argument("import_paths", nargs=-1, required=True)
@click.option("--app-dir", "-d", default=".", show_default=True, help="Directory to import from.")
@click.option("--output-path", "-o", default=None, help="Write the config here (default: stdout).")
def build(import_paths: tuple[str, ...], app_dir: str, output_path: str | None) -> None:
    """Write a config file for applications (`module:app ...`), with each deployment's options."""
    from raylite.serve._cli_state import build_config

    apps = [(path, _load(path, {}, app_dir)) for path in import_paths]
    try:
        document = build_config(apps)
    except (TypeError, ValueError) as e:
        _fail(str(e))
    header = "# This file was generated using the `serve build` command (raylite).\n\n"
    text = header + yaml.safe_dump(document, sort_keys=False)
    if output_path is None:
        click.echo(text, nl=False)
        return
    with open(output_path, "w") as f:
        f.write(text)
    click.echo(f"Config written to {output_path}.")


@main.command(context_settings=_HELP)
@click.option("--address", "-a", default=None, help="Cluster to shut Serve down on (HOST:PORT).")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def shutdown(address: str | None, yes: bool) -> None:
    """Delete every application and stop Serve's controller and proxies (the cluster stays up)."""
    from raylite.serve import _cli_state

    if not yes:
        click.confirm("This deletes every Serve application on the cluster. Continue?", abort=True)
    _connect(address, must_exist=True)
    _serve().shutdown()
    _cli_state.clear_configs()
    click.echo("Serve is shut down: every application was deleted (the cluster stays up).")


@main.command(context_settings=_HELP)
@click.option("--address", "-a", default=None, help="Cluster to start Serve on (HOST:PORT).")
@click.option("--http-host", default=None, help="Host the HTTP proxies listen on.")
@click.option("--http-port", type=int, default=None, help="Port the HTTP proxies listen on.")
@click.option("--proxy-location", type=click.Choice(["Disabled", "HeadOnly", "EveryNode"]), default=None,
              help="Where to run HTTP proxies.")
def start(address: str | None, http_host: str | None, http_port: int | None, proxy_location: str | None) -> None:
    """Start Serve's controller and proxies on a running cluster, without applications."""
    _connect(address, must_exist=True)
    kwargs: dict[str, Any] = {}
    options = _http_options(None, http_host, http_port)
    if options:
        kwargs["http_options"] = options
    if proxy_location:
        kwargs["proxy_location"] = proxy_location
    _start_or_fail(kwargs)
    click.echo("Serve started.")


if __name__ == "__main__":
    main()
