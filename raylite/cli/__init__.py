"""The `raylite` command: start, stop and inspect clusters (thin shell over raylite._core.cluster.cluster)."""

from __future__ import annotations

import json
import os
import signal
import sys

import click

from raylite._core.cluster import cluster as C
from raylite._core.cluster import files as CF
from raylite._core.config import get_config
from raylite.cli.extras import ExtrasGroup
from raylite.cli.ray_start_flags import node_overrides, ray_start_flags


def _fail(message: str) -> None:
    click.echo(f"Error: {message}", err=True)
    sys.exit(1)


def _version() -> str:
    import raylite

    return raylite.__version__


@click.group(name="raylite", cls=ExtrasGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(_version(), "--version", "-V", prog_name="raylite",
                      message="%(prog)s %(version)s")
def main() -> None:
    """raylite: a small, fast, Ray-compatible distributed framework."""


def _prog_name() -> str:
    """The name this CLI was run under: "ray" from compat/ray's command, else "raylite"."""
    ctx = click.get_current_context(silent=True)
    name = ctx.find_root().info_name if ctx is not None else ""
    return "ray" if name == "ray" else "raylite"


@main.command()
@ray_start_flags  # Ray's other `ray start` flags (raylite/cli/ray_start_flags.py)
@click.option("--head", is_flag=True, help="Start the head node of a new cluster on this machine.")
@click.option("--address", default="", help="HOST:PORT of the head to join (worker nodes); 'auto' "
              "reads the address of the cluster started on this machine.")
@click.option("--port", type=int, default=6379, show_default=True, help="Head: TCP port to listen on.")
@click.option("--node-ip-address", default="", help="This node's IP as other nodes reach it.")
@click.option("--num-cpus", type=float, default=None, help="CPUs to offer (default: all).")
@click.option("--num-gpus", type=float, default=None, help="GPUs to offer (default: detected).")
@click.option("--resources", default="{}", help='Custom resources as JSON, e.g. \'{"accel": 2}\'.')
@click.option("--object-store-memory", type=int, default=None, help="Object store size in bytes.")
@click.option("--dashboard-host", default="127.0.0.1", show_default=True, help="Head: address the HTTP "
              "API (jobs, state, logs, dashboard) listens on; 0.0.0.0 for all interfaces (token required).")
@click.option("--dashboard-port", type=int, default=None, help="Head: port of the HTTP API "
              "[default: RAYLITE_DASHBOARD_PORT, else 8265].")
@click.option("--include-dashboard", type=bool, default=True, show_default=True,
              help="Head: serve the HTTP API (jobs, state, logs, dashboard).")
@click.option("--block", is_flag=True, help="Stay in the foreground until the node stops (Ctrl-C stops it).")
@click.option("--persist", default="", help="Head: keep its tables in sqlite:PATH or redis://HOST:PORT "
              "so a restarted head recovers the cluster.")
@click.option("--token", default="", envvar="RAYLITE_TOKEN", help="Cluster token (default: the head "
              "generates one; other nodes on the head's machine read it from its 0600 token file).")
@click.option("--tls-cert", default="", help="PEM certificate for TLS on TCP links (the cluster's CA "
              "unless RAYLITE_TLS_CA_FILE says otherwise); drivers need RAYLITE_TLS_CERT_FILE/_KEY_FILE.")
@click.option("--tls-key", default="", help="PEM private key of --tls-cert.")
def start(head: bool, address: str, port: int, node_ip_address: str, num_cpus: float | None,
          num_gpus: float | None, resources: str, object_store_memory: int | None, dashboard_host: str,
          dashboard_port: int | None, include_dashboard: bool, block: bool, persist: str, token: str, tls_cert: str, tls_key: str) -> None:
    """Start a head node (--head) or join a worker node to a cluster (--address)."""
    if head == bool(address):
        _fail("pass exactly one of --head (new cluster) or --address=HOST:PORT (join one)")
    if bool(tls_cert) != bool(tls_key):
        _fail("--tls-cert and --tls-key go together")
    try:
        custom = json.loads(resources)
        assert isinstance(custom, dict)
    except Exception:  # noqa: BLE001
        _fail(f"--resources must be a JSON object such as '{{\"accel\": 2}}', not {resources!r}")
    from raylite.cli import ray_env

    token_given = bool(token)

    persist = ray_env.apply(head, persist)  # KubeRay's RAY_REDIS_ADDRESS, REDIS_PASSWORD, ...
    if dashboard_port is None:
        dashboard_port = get_config().dashboard_port
    try:
        node = C.start_node(get_config(), head=head, port=port, address=address, node_ip=node_ip_address,
                            num_cpus=num_cpus, num_gpus=num_gpus, resources=custom,
                            object_store_memory=object_store_memory, persist=persist, token=token,
                            tls_cert=tls_cert, tls_key=tls_key, include_dashboard=include_dashboard,
                            dashboard_host=dashboard_host, dashboard_port=dashboard_port,
                            **node_overrides())
    except (C.StartError, ConnectionError, ValueError) as e:
        _fail(str(e))
    if head:
        source = get_config().token_source if not token else ""
        how = (f"with {source} set as here" if source.startswith("RAY_AUTH_TOKEN")
               else f"--token=<token from {node.session_dir}/token>")
        cmd = _prog_name()  # `ray start` (compat/ray) names the commands and module a Ray user types
        mod = "ray" if cmd == "ray" else "raylite"
        click.echo(f"raylite head started (pid {node.pid}, node {node.node_id[:12]}).\n"
                   f"  Address: {node.address}\n"
                   f"  Join other machines with:  {cmd} start --address={node.address} {how}\n"
                   f"  Connect a driver with:     {mod}.init(address='auto')  (on this machine) or "
                   f"{mod}.init(address='{node.address}')\n"
                   f"  Stop it with:              {cmd} stop")
        if node.ray_client_port:
            click.echo(f"  Ray Client (one port):     {mod}.init('ray://{node.address.rsplit(':', 1)[0]}:"
                       f"{node.ray_client_port}')  (from any machine that reaches it, RAYLITE_TOKEN set)")
        if node.dashboard_url:
            token = CF.read_token(os.path.join(node.session_dir, "token"))
            if token and (token_given or get_config().token_source):
                # a token the user gave (--token, RAYLITE_TOKEN, RAY_AUTH_TOKEN from a Kubernetes
                # Secret) stays out of the output: a container's log is read by more people
                token = ""
            click.echo(f"  Dashboard:                 {CF.dashboard_link(node.dashboard_url, token)}\n"
                       f"  Jobs, state and logs API:  {node.dashboard_url}  (send the token: Authorization: "
                       "Bearer <token>; `raylite job submit` does)")
    else:
        click.echo(f"raylite node joined {node.address} (pid {node.pid}, node {node.node_id[:12]}).")
    if block:
        _block(node)


def _block(node: C.StartedNode) -> None:
    """`--block`: stay in the foreground as long as the node runs. SIGTERM/SIGINT stop it
    cleanly (exit 0); a node that dies on its own exits this command non-zero, so a container
    running `ray start --block` (KubeRay) ends and is restarted."""
    asked: list[int] = []

    def stop(signum: int, _frame: object) -> None:
        asked.append(signum)
        node.process.terminate()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    code = node.process.wait()
    C.forget_node(get_config(), node)
    if not asked:
        err = os.path.join(node.session_dir, "logs", "node.err")
        try:  # the container's log is all a dead pod leaves behind
            with open(err, errors="replace") as f:
                tail = f.read()[-4000:].strip()
        except OSError:
            tail = ""
        if tail:
            click.echo(f"--- last lines of {err} ---\n{tail}", err=True)
        _fail(f"the raylite {'head' if node.head else 'node'} exited (code {code}); its log is {err}")


@main.command()
@click.option("--force", "-f", is_flag=True, help="Kill at once (SIGKILL) instead of a clean stop.")
def stop(force: bool) -> None:
    """Stop the raylite nodes started on this machine (only raylite's own processes)."""
    stopped = C.stop_nodes(get_config(), force=force)
    if not stopped:
        click.echo("No raylite nodes were running on this machine.")
    for p in stopped:
        click.echo(f"Stopped raylite {'head' if p.head else 'node'} (pid {p.pid}).")


@main.command()
@click.option("--address", default="auto", show_default=True, help="HOST:PORT of the head.")
def status(address: str) -> None:
    """Show nodes (alive and dead), total and used resources, and pending demands."""
    try:
        st = C.cluster_status(get_config(), address)
    except (ConnectionError, ValueError) as e:
        _fail(str(e))
    except Exception as e:  # noqa: BLE001  e.g. a refused token
        _fail(f"{type(e).__name__}: {e}")
    click.echo(C.format_status(st))


@main.command()
@click.option("--address", default="auto", show_default=True, help="HOST:PORT of the head.")
@click.option("--limit", "--num-entries", "--n", "limit", type=int, default=100, show_default=True,
              help="Show at most this many objects (Ray's --num-entries/--n).")
@click.option("--stats-only", is_flag=True, help="Only the totals per location, no object list (as Ray's).")
@click.option("--units", type=click.Choice(["B", "KB", "MB", "GB"], case_sensitive=False), default="MB",
              show_default=True, help="Unit of the totals (as Ray's; MB is MiB).")
def memory(address: str, limit: int, stats_only: bool, units: str) -> None:
    """List objects: size, owner, where they are (inline, shared memory, spilled), who holds refs."""
    import raylite
    from raylite._state import format_objects, list_objects, summarize_objects

    try:
        raylite.init(address=C.local_address(get_config(), address), log_to_driver=False)
    except Exception as e:  # noqa: BLE001  no cluster there, or a refused token
        _fail(f"could not connect to a raylite cluster at {address!r}: {e}")
    try:
        if not stats_only:
            click.echo(format_objects(list_objects(limit=limit)))
        summary = summarize_objects()
        unit = units.upper()
        scale = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}[unit]
        name = unit if unit == "B" else unit[0] + "iB"
        if stats_only:
            click.echo(f"{summary['total_objects']} objects, {summary['total_bytes'] / scale:.1f} {name} in all")
        for where, totals in sorted(summary["by_location"].items()):
            click.echo(f"  {where}: {totals['count']} objects, {totals['bytes'] / scale:.1f} {name}")
    finally:
        raylite.shutdown()


from raylite.cli.autoscaler import autoscaler as _autoscaler  # noqa: E402  (issue 27: autoscaling)
from raylite.cli.autoscaler import kuberay_autoscaler as _kuberay_autoscaler  # noqa: E402
from raylite.cli.health_check import health_check as _health_check  # noqa: E402  (issue 27: KubeRay)
from raylite.cli.job import job as _job_group  # noqa: E402  (issue 12: jobs)
from raylite.cli.serve import serve as _serve_group  # noqa: E402 - lazy: loads Serve on first use
from raylite.cli.state import register as _register_state  # noqa: E402  (issue 12: list/get/summary/logs/timeline)

main.add_command(_job_group)
_register_state(main)
main.add_command(_serve_group)
main.add_command(_health_check)
main.add_command(_kuberay_autoscaler)
main.add_command(_autoscaler)

if __name__ == "__main__":
    main()
