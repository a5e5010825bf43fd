"""Every `ray start` flag, accepted by `raylite start`.

Scripts written for Ray's CLI pass flags raylite has no use for (`--disable-usage-stats`,
`--min-worker-port`, ...). Rejecting them stops such a script at its first line, so each of
Ray's flags is listed here with what it does in raylite: most of those that mean something
here become node settings (`--memory`, `--labels`, `--temp-dir`, ...); the rest are accepted
and print one line saying they have no effect.

The table is applied to the `start` command by `@ray_start_flags`, which skips a flag the
command already declares itself (so `start` can give one real handling later without this
table changing), and hands the node settings to the command through `node_overrides()`.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import click

# kinds: "flag" (no value), "int", "float", "str", "bool" (true/false value), "count" (-v -v),
# or a tuple of choices
_NO_EFFECT = None


@dataclass
class NodeOverrides:
    """What the accepted flags change about the node `raylite start` starts."""

    env: dict[str, str] = field(default_factory=dict)  # RAYLITE_* settings for the daemon
    resources: dict[str, float] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    node_port: int = 0
    agent_port: int = 0  # the node's health server (KubeRay's probes), node_health.py
    metrics_port: int = 0  # the node's Prometheus metrics


def _set_env(name: str) -> Callable[[Any, NodeOverrides], None]:
    def apply(value: Any, out: NodeOverrides) -> None:
        out.env[name] = os.path.abspath(os.path.expanduser(str(value))) if name.endswith("_DIR") else str(value)
    return apply


def _memory(value: int, out: NodeOverrides) -> None:
    if value < 0:
        raise click.BadParameter("must be a number of bytes >= 0", param_hint="--memory")
    out.resources["memory"] = value


def _verbose(value: int, out: NodeOverrides) -> None:
    out.env["RAYLITE_LOG_LEVEL"] = "DEBUG" if value >= 2 else "INFO"


def _node_port(value: int, out: NodeOverrides) -> None:
    out.node_port = value


def _port(attr: str, flag: str) -> Callable[[int, NodeOverrides], None]:
    def apply(value: int, out: NodeOverrides) -> None:
        if not 0 < value < 65536:
            raise click.BadParameter(f"must be a TCP port (1-65535), not {value}", param_hint=flag)
        setattr(out, attr, value)
    return apply


def _labels(value: str, out: NodeOverrides) -> None:
    out.labels.update(parse_labels(value, "--labels"))


def _labels_file(value: str, out: NodeOverrides) -> None:
    try:
        text = open(os.path.expanduser(value)).read()
    except OSError as e:
        raise click.BadParameter(f"cannot read {value}: {e.strerror}", param_hint="--labels-file") from None
    try:
        import yaml  # JSON is YAML too

        data = yaml.safe_load(text)
    except ImportError:
        data = json.loads(text)
    if not isinstance(data, dict):
        raise click.BadParameter("the file must hold a mapping of label keys to values",
                                 param_hint="--labels-file")
    out.labels.update({str(k): str(v) for k, v in data.items()})




def parse_labels(text: str, hint: str) -> dict[str, str]:
    """Ray's label syntax `key1=value1,key2=value2` (a JSON object is accepted too)."""
    text = text.strip()
    if not text:
        return {}
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as e:
            raise click.BadParameter(f"not valid JSON: {e}", param_hint=hint) from None
        return {str(k): str(v) for k, v in data.items()}
    labels: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not key=value; write e.g. "
                                     "--labels='region=us-west,tier=gpu'", param_hint=hint)
        labels[key.strip()] = value.strip()
    return labels


# (flag, kind, effect): effect is a function applying the value, or a string saying why the
# flag has no effect here.
FLAGS: list[tuple[str, Any, Any]] = [
    # settings of the node
    ("--memory", "int", _memory),
    ("--labels", "str", _labels),
    ("--labels-file", "str", _labels_file),
    ("--temp-dir", "str", _set_env("RAYLITE_TEMP_DIR")),
    ("--plasma-directory", "str", _set_env("RAYLITE_SHM_DIR")),
    ("--object-spilling-directory", "str", _set_env("RAYLITE_SPILL_DIR")),
    ("--node-manager-port", "int", _node_port),
    ("--redis-username", "str", _set_env("RAYLITE_REDIS_USERNAME")),  # for --persist redis://
    ("--redis-password", "str", _set_env("RAYLITE_REDIS_PASSWORD")),
    ("--verbose", "count", _verbose),
    ("--dashboard-agent-listen-port", "int", _port("agent_port", "--dashboard-agent-listen-port")),
    ("--metrics-export-port", "int", _port("metrics_port", "--metrics-export-port")),
    # the head's Ray Client server (ray://HOST:PORT); 0 runs none (default 10001)
    ("--ray-client-server-port", "int", _set_env("RAYLITE_RAY_CLIENT_SERVER_PORT")),
    # accepted for compatibility
    ("--disable-usage-stats", "flag", "raylite collects no usage statistics"),
    ("--dashboard-agent-grpc-port", "int", "raylite runs no dashboard agent"),
    ("--dashboard-grpc-port", "int", "raylite runs no dashboard agent"),
    ("--runtime-env-agent-port", "int", "runtime environments are set up by the node itself"),
    ("--object-manager-port", "int", "objects travel over the node's one TCP port (--node-manager-port)"),
    ("--gcs-server-port", "int", "the head listens on --port"),
    ("--min-worker-port", "int", "workers use ephemeral ports"),
    ("--max-worker-port", "int", "workers use ephemeral ports"),
    ("--worker-port-list", "str", "workers use ephemeral ports"),
    ("--node-name", "str", "nodes are named by their id and IP"),
    ("--redis-shard-ports", "str", "the head keeps its tables itself (see --persist)"),
    ("--storage", "str", "give storage paths to Train's RunConfig(storage_path=...)"),
    ("--system-config", "str", "Ray's internal settings do not apply; raylite reads RAYLITE_* variables"),
    ("--autoscaling-config", "str", "the autoscaler runs apart from the head: `raylite autoscaler --config FILE`"),
    ("--no-monitor", "flag", "the head starts no monitor process; the autoscaler is `raylite autoscaler`"),
    ("--no-redirect-output", "flag", "node output always goes to the session's logs directory"),
    ("--enable-object-reconstruction", "flag", "lineage reconstruction is always on"),
    ("--tracing-startup-hook", "str", "tracing hooks are not supported"),
    ("--ray-debugger-external", "flag", "the Ray debugger is not supported"),
    ("--include-log-monitor", "bool", "worker output reaches drivers without a log monitor"),
    ("--enable-resource-isolation", "flag", "raylite does not set up cgroups"),
    ("--system-reserved-cpu", "float", "raylite does not set up cgroups"),
    ("--system-reserved-memory", "int", "raylite does not set up cgroups"),
    ("--cgroup-path", "str", "raylite does not set up cgroups"),
    ("--proxy-server-url", "str", "the dashboard answers its own requests; it redirects none"),
    ("--huge-pages", "flag", "the object store uses the shared-memory directory's page size"),
    ("--plasma-store-socket-name", "str", "the node names its own sockets in the session directory"),
    ("--raylet-socket-name", "str", "the node names its own sockets in the session directory"),
    ("--log-style", ("auto", "record", "pretty"), "raylite's CLI output has one style"),
    ("--log-color", ("auto", "false", "true"), "raylite's CLI output is not colored"),
]

_HELP = {
    "--memory": "Bytes of memory to offer tasks and actors (the `memory` resource).",
    "--labels": "Node labels: key1=value1,key2=value2 (or a JSON object).",
    "--labels-file": "A YAML or JSON file with a mapping of node labels.",
    "--temp-dir": "Directory for session files (set RAYLITE_TEMP_DIR to the same for `raylite "
                  "stop/status` and drivers).",
    "--plasma-directory": "Directory holding the shared-memory object store (default /dev/shm).",
    "--object-spilling-directory": "Directory objects spill to when the store is full.",
    "--node-manager-port": "TCP port of this node (default: a free one).",
    "--redis-username": "Username for the Redis server of --persist redis://HOST:PORT.",
    "--redis-password": "Password for the Redis server of --persist redis://HOST:PORT.",
    "--verbose": "More log output from the node (-v: INFO, -vv: DEBUG).",
    "--dashboard-agent-listen-port": "Serve the node's health endpoints (/api/healthz, /api/local_raylet_healthz, "
                                     "/api/gcs_healthz on the head; no token) on this port (Ray's: 52365).",
    "--ray-client-server-port": "The head's Ray Client server port, for drivers connecting with "
                                "init('ray://HOST:PORT') (default 10001; 0 runs none).",
    "--metrics-export-port": "Serve this node's Prometheus metrics at /metrics on this port (token required).",
}

_CTX_KEY = "raylite.ray_start_flags"


def _option(flag: str, kind: Any, effect: Any) -> Callable:
    name = flag.lstrip("-").replace("-", "_")
    text = _HELP.get(flag) if callable(effect) else f"Accepted for Ray compatibility; no effect: {effect}."
    text = text or "Accepted for Ray compatibility."
    if kind == "flag":
        return click.option(flag, name, is_flag=True, default=None, help=text)
    if kind == "count":
        return click.option("-v", flag, name, count=True, help=text)
    types = {"int": int, "float": float, "str": str, "bool": click.BOOL}
    click_type = click.Choice(kind) if isinstance(kind, tuple) else types[kind]
    return click.option(flag, name, type=click_type, default=None, help=text)


def ray_start_flags(command: Callable) -> Callable:
    """Add every flag of FLAGS that `command` does not declare itself; apply them before it runs.

    Use it right under `@group.command()`, above the command's own options.
    """
    declared = {opt for p in getattr(command, "__click_params__", []) for opt in p.opts}
    table = [(flag, kind, effect) for flag, kind, effect in FLAGS if flag not in declared]

    @functools.wraps(command)
    def run(**kwargs: Any) -> Any:
        out = NodeOverrides()
        for flag, _kind, effect in table:
            value = kwargs.pop(flag.lstrip("-").replace("-", "_"))
            if value is None or (_kind in ("flag", "count") and not value):
                continue
            if callable(effect):
                effect(value, out)
            else:
                click.echo(f"Note: {flag} has no effect in raylite ({effect}).", err=True)
        os.environ.update(out.env)
        if out.env:  # the settings now in the environment are read by this process's Config too
            from raylite._core.config import reload_config

            reload_config()
        click.get_current_context().meta[_CTX_KEY] = out
        return command(**kwargs)

    own = list(getattr(command, "__click_params__", []))
    run.__click_params__ = []  # type: ignore[attr-defined]
    for flag, kind, effect in reversed(table):  # click lists options in reverse order of adding
        run = _option(flag, kind, effect)(run)
    # click reverses this list: the command's own options come first in --help, then Ray's
    run.__click_params__ = run.__click_params__ + own  # type: ignore[attr-defined]
    return run


def node_overrides() -> dict[str, Any]:
    """Keyword arguments for `cluster.start_node` from the flags of the running command."""
    ctx = click.get_current_context(silent=True)
    out: NodeOverrides | None = ctx.meta.get(_CTX_KEY) if ctx is not None else None
    if out is None:
        return {}
    kwargs: dict[str, Any] = {}
    if out.labels:
        kwargs["labels"] = out.labels
    if out.node_port:
        kwargs["node_port"] = out.node_port
    if out.resources:
        kwargs["extra_resources"] = out.resources
    if out.agent_port:
        kwargs["agent_port"] = out.agent_port
    if out.metrics_port:
        kwargs["metrics_port"] = out.metrics_port
    return kwargs
