"""`raylite list|get|summary|logs|timeline`: cluster state through the head's HTTP API."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

from raylite.cli.table import format_table, format_time_ms

_ADDRESS_HELP = ("The cluster's API address, e.g. http://127.0.0.1:8265 (default: RAY_ADDRESS, the "
                 "cluster running on this machine, or http://127.0.0.1:8265).")
RESOURCES = ["actors", "tasks", "nodes", "objects", "placement-groups", "jobs", "workers"]
# columns shown without --detail (Ray's defaults, roughly)
COLUMNS = {
    "actors": ["actor_id", "class_name", "state", "job_id", "name", "node_id", "pid", "ray_namespace"],
    "tasks": ["task_id", "attempt_number", "name", "state", "job_id", "actor_id", "type", "func_or_class_name",
              "node_id", "worker_pid", "error_type"],
    "nodes": ["node_id", "node_ip", "is_head_node", "state", "state_message", "resources_total"],
    "objects": ["object_id", "object_size", "task_status", "reference_type", "location", "type", "pid", "ip"],
    "placement_groups": ["placement_group_id", "name", "state", "strategy"],
    "jobs": ["job_id", "submission_id", "type", "status", "entrypoint", "start_time"],
    "workers": ["worker_id", "worker_type", "is_alive", "node_id", "ip", "pid"],
}


def _fail(message: str) -> None:
    click.echo(f"Error: {message}", err=True)
    sys.exit(1)


def _guard(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except (ConnectionError, PermissionError, ValueError, RuntimeError, LookupError) as e:
        _fail(str(e))


def _render(rows: list[dict[str, Any]], resource: str, fmt: str, detail: bool) -> str:
    if fmt == "json":
        return json.dumps(rows, indent=2, default=str)
    if fmt == "yaml":
        yaml = _yaml()

        return yaml.safe_dump([dict(r) for r in rows], sort_keys=False, default_flow_style=False).rstrip()
    if not rows:
        return f"No {resource.replace('_', ' ')} found."
    cols = [c for c in rows[0] if c != "events"] if detail else [c for c in COLUMNS[resource] if c in rows[0]]
    table = [[_cell(r.get(c), c) for c in cols] for r in rows]
    return format_table([c.upper() for c in cols], table)


def _yaml() -> Any:
    try:
        import yaml
    except ImportError:
        _fail("--format yaml needs PyYAML (pip install pyyaml); --format json needs nothing")
    return yaml


def _cell(value: Any, column: str = "") -> str:
    if value is None:
        return "-"
    if column.endswith(("_time", "_time_ms")) and isinstance(value, (int, float)) and value > 0:
        return format_time_ms(value)  # epoch ms, as `raylite job list` shows them (json/yaml keep ms)
    if isinstance(value, dict):
        return ",".join(f"{k}:{_amount(k, v)}" for k, v in value.items())
    return str(value)


def _amount(key: str, value: Any) -> str:
    """A resource amount for a table: bytes as GiB (`memory:16.48GiB`, not `1.76932e+10`),
    other numbers short (`CPU:2`, `GPU:0.5`); json/yaml keep the raw numbers."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if str(key).endswith("memory"):
            return f"{value / 2**30:.2f}GiB"
        return f"{value:g}"
    return str(value)


@click.command(name="list")
@click.argument("resource", type=click.Choice(RESOURCES, case_sensitive=False))
@click.option("--address", default=None, help=_ADDRESS_HELP)
@click.option("--filter", "-f", "filters", multiple=True, help="KEY=VALUE or KEY!=VALUE (repeatable).")
@click.option("--limit", type=int, default=100, show_default=True, help="At most this many rows.")
@click.option("--detail", is_flag=True, help="Every field, not the default columns.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True)
@click.option("--timeout", type=int, default=30, show_default=True)
def list_cmd(resource: str, address: str | None, filters: tuple[str, ...], limit: int, detail: bool,
             fmt: str, timeout: int) -> None:
    """List actors, tasks, nodes, objects, placement groups, jobs or workers."""
    from raylite.dashboard.state_client import list_resource, normalize_resource, parse_filter

    key = normalize_resource(resource)
    parsed = [_guard(parse_filter, f) for f in filters]
    rows = _guard(list_resource, key, address, parsed, limit, timeout, detail)
    click.echo(_render(rows, key, fmt, detail))


@click.command(name="get")
@click.argument("resource", type=click.Choice(RESOURCES, case_sensitive=False))
@click.argument("id")
@click.option("--address", default=None, help=_ADDRESS_HELP)
@click.option("--format", "fmt", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True)
@click.option("--timeout", type=int, default=30, show_default=True)
def get_cmd(resource: str, id: str, address: str | None, fmt: str, timeout: int) -> None:
    """Show one actor, task, node, object, placement group, job or worker by id."""
    from raylite.dashboard.state_client import get_resource, normalize_resource

    key = normalize_resource(resource)
    row = _guard(get_resource, key, id, address, timeout)
    if row is None:
        _fail(f"{key.rstrip('s').replace('_', ' ')} {id} not found (list them with `raylite list {resource}`)")
    if fmt == "json":
        click.echo(json.dumps(row, indent=2, default=str))
    else:
        click.echo(_yaml().safe_dump(dict(row), sort_keys=False).rstrip())


@click.command(name="summary")
@click.argument("resource", type=click.Choice(["tasks", "actors", "objects"], case_sensitive=False))
@click.option("--address", default=None, help=_ADDRESS_HELP)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def summary_cmd(resource: str, address: str | None, fmt: str) -> None:
    """Summarize tasks (by function), actors (by class) or objects (by location)."""
    from raylite.dashboard.state_client import summarize

    result = _guard(summarize, resource, address)
    cluster = result["node_id_to_summary"]["cluster"]
    if fmt == "json":
        click.echo(json.dumps(result, indent=2, default=str))
        return
    rows = []
    for name, s in sorted(cluster["summary"].items()):
        counts = s.get("state_counts") or s.get("ref_type_counts") or {}
        extra = [f"{s['total_size_mb']:.1f} MiB"] if "total_size_mb" in s else [s.get("type") or ""]
        rows.append([name, *extra, ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))])
    label = {"tasks": "FUNC_OR_CLASS_NAME", "actors": "CLASS_NAME", "objects": "LOCATION"}[resource]
    middle = "SIZE" if resource == "objects" else "TYPE"
    totals = {k: v for k, v in cluster.items() if k.startswith("total")}
    click.echo(", ".join(f"{k}: {v:g}" if isinstance(v, float) else f"{k}: {v}" for k, v in totals.items()))
    if rows:
        click.echo(format_table([label, middle, "COUNTS"], rows))


_RAY_LOG_KINDS = ("cluster", "actor", "task", "job")  # Ray's `ray logs KIND ...` spellings


@click.command(name="logs")
@click.argument("filename", required=False, default="")
@click.argument("pattern", required=False, default="")
@click.option("--id", "id_", default="", help="With Ray's `ray logs actor|task|job`: the actor, task or job id.")
@click.option("--address", default=None, help=_ADDRESS_HELP)
@click.option("--node-id", default="", help="The node (id or prefix); default: the head's.")
@click.option("--actor-id", default="", help="Print the output of this actor's worker.")
@click.option("--task-id", default="", help="Print the output of the worker that ran this task.")
@click.option("--job-id", default="", help="Print a submitted job's driver log (submission or job id).")
@click.option("--err", is_flag=True, help="With --actor-id/--task-id: stderr instead of stdout.")
@click.option("--follow", is_flag=True, help="Keep printing what is appended.")
@click.option("--tail", type=int, default=-1, help="Only the last N lines (default: all).")
@click.option("--glob", "glob_", default="", help="With no file named: list only files matching this.")
def logs_cmd(filename: str, pattern: str, id_: str, address: str | None, node_id: str, actor_id: str,
             task_id: str, job_id: str, err: bool, follow: bool, tail: int, glob_: str) -> None:
    """List the cluster's log files, or print one (by name, actor, task or job).

    Ray's spellings work too: `logs cluster [FILE|GLOB]`, `logs actor|task|job --id ID`."""
    from raylite.dashboard.log_client import list_logs, stream_log

    if filename in _RAY_LOG_KINDS:
        kind, filename = filename, ""
        if kind == "cluster":
            if any(c in pattern for c in "*?["):
                glob_ = pattern
            else:
                filename = pattern
        elif not id_:
            _fail(f"`logs {kind}` needs --id <{kind} id> (as in Ray), or use --{kind}-id")
        else:
            actor_id, task_id, job_id = (id_ if kind == k else v for k, v in
                                         (("actor", actor_id), ("task", task_id), ("job", job_id)))
    elif pattern:
        _fail(f"unexpected argument {pattern!r}: name one log file, or use Ray's `logs cluster FILE|GLOB`")

    if not (filename or actor_id or task_id or job_id):
        rows = _guard(list_logs, address, node_id, glob_)
        if not rows:
            click.echo("No log files found.")
            return
        table = [[r["node_id"][:12], r["node_ip"], r["category"], r["filename"], r["size"]] for r in rows]
        click.echo(format_table(["NODE_ID", "NODE_IP", "CATEGORY", "FILENAME", "SIZE"], table))
        return
    chunks = stream_log(address, node_id=node_id, filename=filename, actor_id=actor_id, task_id=task_id,
                        job_id=job_id, tail=tail, follow=follow, suffix="err" if err else "out")
    try:
        for chunk in chunks:
            sys.stdout.buffer.write(chunk)
            sys.stdout.flush()
    except KeyboardInterrupt:
        pass
    except (ConnectionError, PermissionError, LookupError) as e:
        _fail(str(e))


@click.command(name="timeline")
@click.option("--address", default=None, help=_ADDRESS_HELP)
@click.option("--job-id", default=None, help="Only this job's tasks.")
@click.option("--output", "-o", default=None, help="File to write (default: /tmp/raylite-timeline-<time>.json).")
def timeline_cmd(address: str | None, job_id: str | None, output: str | None) -> None:
    """Write a Chrome trace of task and actor executions (open it in chrome://tracing or Perfetto)."""
    from raylite.dashboard.state_client import timeline_events

    events = _guard(timeline_events, address, job_id)
    path = output or f"/tmp/raylite-timeline-{time.strftime('%Y-%m-%d_%H-%M-%S')}.json"
    with open(path, "w") as f:
        json.dump(events, f)
    click.echo(f"Trace file written to {path} ({sum(e.get('ph') == 'X' for e in events)} task executions). "
               "Open it in chrome://tracing or https://ui.perfetto.dev.")


def register(main: click.Group) -> None:
    for command in (list_cmd, get_cmd, summary_cmd, logs_cmd, timeline_cmd):
        main.add_command(command)
