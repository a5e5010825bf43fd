"""What `raylite start / stop / status` do, as plain functions (the CLI is a thin shell).

A node started here is a detached `python -m raylite._core.cluster.daemon` process (the head
runs in the head node's process). It reports READY or ERROR on its stdout; its stderr
goes to <session>/logs/node.err.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

from raylite._core import accelerators
from raylite._core import resources as R
from raylite._core.cluster import files as CF
from raylite._core.cluster.launch import daemon_command, json_argument, package_root_path
from raylite._core.config import Config
from raylite._core.node import process_tree
from raylite._core.private_paths import owned_dir


class StartError(RuntimeError):
    """A node could not start; the message names the cause and the fix."""


@dataclass
class StartedNode:
    pid: int
    session_dir: str
    address: str  # HOST:PORT of the head
    node_id: str
    head: bool
    process: subprocess.Popen
    dashboard_url: str = ""
    ray_client_port: int = 0  # the head's Ray Client server (ray://HOST:PORT), 0 when none


def node_resources(num_cpus: float | None, num_gpus: float | None, resources: dict | None,
                   head: bool, ip: str) -> dict[str, int]:
    from raylite._core.cluster.driver import detect_resources

    total = detect_resources(num_cpus, num_gpus, resources)
    if not head:
        total.pop("node:__internal_head__", None)
    total.update(R.to_fixed({f"node:{ip}": 1}))
    return total


def _check_auth(config: Config) -> None:
    """RAY_AUTH_MODE=disabled: refuse unless RAYLITE_ALLOW_NO_AUTH=1, and then say so loudly."""
    from raylite._core.config import no_auth_refusal

    refusal = no_auth_refusal(config)
    if refusal:
        raise StartError(refusal)
    if config.auth_disabled:
        print("WARNING: raylite is starting WITHOUT authentication (RAY_AUTH_MODE=disabled, "
              "RAYLITE_ALLOW_NO_AUTH=1): anyone who can reach this node's ports can run code on it "
              "and read its data. Use RAY_AUTH_MODE=token with RAY_AUTH_TOKEN outside a trusted "
              "network.", file=sys.stderr)


def default_ip(toward: str = "") -> str:
    """This machine's IP as other machines reach it (raylite/_core/node/ip.py says how)."""
    from raylite._core.node.ip import detect_node_ip

    return detect_node_ip(toward)


def start_node(config: Config, *, head: bool, port: int = 6379, address: str = "", node_ip: str = "",
               num_cpus: float | None = None, num_gpus: float | None = None,
               resources: dict | None = None, object_store_memory: int | None = None,
               persist: str = "", token: str = "", tls_cert: str = "", tls_key: str = "",
               timeout_s: float = 60.0, labels: dict | None = None, node_port: int = 0,
               extra_resources: dict | None = None, include_dashboard: bool = False,
               dashboard_host: str = "127.0.0.1", dashboard_port: int = 8265, agent_port: int = 0,
               metrics_port: int = 0, creator_pid: int = 0, env: dict[str, str] | None = None) -> StartedNode:
    """Start a head node or a worker node as a detached process; wait until it serves.

    `extra_resources` are added to `resources` (e.g. `memory` from `raylite start --memory`);
    `node_port` fixes the node's TCP port (0: a free one); `creator_pid`: the node stops when
    that process exits (`raylite.cluster_utils.Cluster`'s nodes die with the program that made
    them); `env`: extra environment for the daemon (e.g. from Ray's `_system_config`). Without
    `node_ip` the node finds its own address (a pod is told none) and a head listens on every
    interface, as Ray's GCS does, so other machines and `127.0.0.1:PORT` (KubeRay's RAY_ADDRESS
    in the head pod) both reach it. `agent_port` starts the node's health server
    (node_health.py), `metrics_port` its metrics."""
    _check_auth(config)
    temp_dir = config.temp_dir
    if not node_ip and not head and address and address != "auto":
        with contextlib.suppress(ValueError):
            node_ip = default_ip(CF.normalize_address(address))
    ip = node_ip or default_ip()
    # the interface every TCP listener meant for other machines binds: the IP the node was told,
    # else every one (the head's port, the Ray Client's, the health and metrics ports)
    head_bind = ip if node_ip else "0.0.0.0"
    session = os.path.join(temp_dir, f"session_{time.strftime('%Y-%m-%d_%H-%M-%S')}_{os.getpid()}_"
                           f"{secrets.token_hex(2)}")
    owned_dir(temp_dir, private=False)
    owned_dir(session)
    os.makedirs(os.path.join(session, "logs"), exist_ok=True)
    CF.private_dir(os.path.join(session, "sockets"))
    try:
        return _start_in(session, config, head=head, port=port, address=address, ip=ip, head_bind=head_bind,
                         num_cpus=num_cpus, num_gpus=num_gpus, resources=resources,
                         object_store_memory=object_store_memory, persist=persist, token=token,
                         tls_cert=tls_cert, tls_key=tls_key, timeout_s=timeout_s, labels=labels,
                         node_port=node_port, extra_resources=extra_resources,
                         include_dashboard=include_dashboard, dashboard_host=dashboard_host,
                         dashboard_port=dashboard_port, agent_port=agent_port, metrics_port=metrics_port,
                         creator_pid=creator_pid, env=env)
    except BaseException:
        _discard_if_empty(session)  # a failed start leaves no empty session behind (a log stays)
        raise


def _discard_if_empty(session: str) -> None:
    """Remove `session` unless some file in it has content (a log that says why it failed)."""
    for root, _dirs, names in os.walk(session):
        for name in names:
            with contextlib.suppress(OSError):
                if os.path.getsize(os.path.join(root, name)) > 0 and name != "token":
                    return
    shutil.rmtree(session, ignore_errors=True)


def _start_in(session: str, config: Config, *, head: bool, port: int, address: str, ip: str, head_bind: str,
              num_cpus: float | None, num_gpus: float | None, resources: dict | None,
              object_store_memory: int | None, persist: str, token: str, tls_cert: str, tls_key: str,
              timeout_s: float, labels: dict | None, node_port: int, extra_resources: dict | None,
              include_dashboard: bool, dashboard_host: str, dashboard_port: int, agent_port: int,
              metrics_port: int, creator_pid: int, env: dict[str, str] | None) -> StartedNode:
    """start_node's body, once the session directory exists."""
    temp_dir = config.temp_dir
    if head:
        port = _check_port_free(head_bind, port)
        token = token or config.token or secrets.token_hex(16)
        hostport = f"{ip}:{port}"
        token_file = os.path.join(session, "token")
        CF.write_private(token_file, token)
        extra = ["--head", "--head-port", str(port), "--head-bind", head_bind]
        if persist:
            extra += ["--persist", persist]
        if include_dashboard:
            extra += ["--dashboard-host", dashboard_host, "--dashboard-port", str(dashboard_port)]
    else:
        if not address:
            raise StartError("raylite start needs --head or --address=HOST:PORT of a running head")
        hostport, found = CF.resolve(address, temp_dir, token or config.token)
        token = token or config.token or found
        extra = ["--head-address", f"tcp://{hostport}"]
    extra += ["--bind", head_bind]
    total = node_resources(num_cpus, num_gpus, {**accelerators.label_resources(labels), **(resources or {}),
                                                **(extra_resources or {})}, head, ip)
    if labels:
        extra += ["--labels", json_argument(labels, session, "labels")]
    if node_port:
        extra += ["--node-port", str(node_port)]
    if agent_port:
        extra += ["--agent-port", str(agent_port)]
    if metrics_port:
        extra += ["--metrics-port", str(metrics_port)]
    if creator_pid:
        extra += ["--creator-pid", str(creator_pid)]
    env = {**os.environ, **(env or {})}
    env["RAYLITE_TOKEN"] = token  # never on the command line, where `ps` shows it
    env["RAYLITE_TEMP_DIR"] = temp_dir
    if object_store_memory:
        env["RAYLITE_OBJECT_STORE_BYTES"] = str(int(object_store_memory))
    if tls_cert:
        env["RAYLITE_TLS_CERT_FILE"] = os.path.abspath(tls_cert)
        env["RAYLITE_TLS_KEY_FILE"] = os.path.abspath(tls_key) if tls_key else ""
    env["PYTHONPATH"] = os.pathsep.join(p for p in [*package_root_path(), env.get("PYTHONPATH", "")] if p)
    cmd = [*daemon_command(), "--session-dir", session, "--ip", ip,
           "--resources", json_argument(total, session, "resources"), *extra]
    err_path = os.path.join(session, "logs", "node.err")
    with open(err_path, "wb") as errf:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errf, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True, close_fds=True)
    line = _read_line(proc, timeout_s)
    if not line.startswith("READY "):
        with contextlib.suppress(Exception):
            proc.kill()
        proc.wait(5)
        if line.startswith("ERROR "):
            raise StartError(line[len("ERROR "):])
        tail = ""
        with contextlib.suppress(OSError):
            tail = open(err_path).read()[-3000:]
        raise StartError(f"the raylite node did not start (see {err_path}):\n{tail}")
    info = json.loads(line[len("READY "):])
    if proc.stdout is not None:
        proc.stdout.close()
    CF.write_node_file(session, proc.pid, head, hostport)
    if head:
        CF.write_address_file(temp_dir, hostport, token_file, session, info.get("dashboard_url", ""),
                              bind=head_bind)
    return StartedNode(proc.pid, session, hostport, info["node_id"], head, proc, info.get("dashboard_url", ""),
                       info.get("ray_client_port", 0))


def _check_port_free(ip: str, port: int) -> int:
    """The head's port: `port` once checked free, or for 0 a free port the system picks (as
    `ray start --head --port 0` does: the head needs a real port to write in its address)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((ip, port))
        except OSError as e:
            raise StartError(f"port {port} on {ip} is in use ({e.strerror}). A raylite head may already "
                             "run there: stop it with `raylite stop`, or pick another port with "
                             "--port.") from None
        return s.getsockname()[1]


def _read_line(proc: subprocess.Popen, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buf = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf += chunk
            if b"\n" in buf:
                return buf.split(b"\n", 1)[0].decode(errors="replace")
        elif proc.poll() is not None:
            break
    return buf.decode(errors="replace")


def stop_nodes(config: Config, force: bool = False, grace_s: float = 10.0) -> list[CF.NodeProcess]:
    """Stop the node daemons `raylite start` started on this host (their workers go with them)."""
    procs = CF.local_node_processes(config.temp_dir)
    tags = [process_tree.node_tag(p.pid) for p in procs]  # before they go (process_tree.py)
    sig = signal.SIGKILL if force else signal.SIGTERM
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, sig)
    deadline = time.monotonic() + grace_s
    for p in procs:
        while _alive(p.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(p.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(p.session_dir, CF.NODE_FILE))
    for tag in tags:  # what the workers started, left when a node was killed (--force)
        if tag:
            process_tree.kill_node_processes(tag)
    info = CF.read_address_file(config.temp_dir)
    if info is not None and any(p.head and p.session_dir == info.get("session_dir") for p in procs):
        with contextlib.suppress(OSError):
            os.unlink(CF.address_file(config.temp_dir))
    return procs


def forget_node(config: Config, node: StartedNode) -> None:
    """A node stopped by other means than stop_nodes (e.g. --block and Ctrl-C): drop its files."""
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(node.session_dir, CF.NODE_FILE))
    info = CF.read_address_file(config.temp_dir)
    if node.head and info is not None and info.get("session_dir") == node.session_dir:
        with contextlib.suppress(OSError):
            os.unlink(CF.address_file(config.temp_dir))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(ChildProcessError, OSError):
        done, _ = os.waitpid(pid, os.WNOHANG)  # our own child (tests): reap it
        if done:
            return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def local_address(config: Config, address: str = "auto") -> str:
    """What "auto" means to the CLI on this machine: the cluster `raylite start` left running,
    else the newest live local cluster that a driver's `init()` started (its head's unix
    socket, `unix://<session>/sockets/head`), as `raylite list` and `raylite job list` find it.
    Any other address is returned as it is."""
    from raylite._core.cluster import sessions

    if address != "auto" or CF.running_cluster_address(config.temp_dir):
        return address
    for session in reversed(sessions.sessions(config.temp_dir)):
        head = os.path.join(session, "sockets", "head")
        if os.path.exists(head) and sessions.is_live(session):
            return "unix://" + head
    return address


def head_target(config: Config, address: str = "auto") -> tuple[str, str]:
    """(HOST:PORT or unix://..., token) of the head that `address` names, as the CLI reaches it."""
    address = local_address(config, address)
    if address.startswith("unix://"):
        return address, config.token or CF.local_head_token(address)
    return CF.resolve(address, config.temp_dir, config.token)


def cluster_demand(config: Config, address: str = "auto") -> dict:
    """The head's nodes (with idle seconds) and what waits for a node: the autoscaler's input."""
    from raylite._core import protocol as P
    from raylite._core.cluster.driver import run_head_request

    hostport, token = head_target(config, address)
    info = run_head_request(hostport, token, P.GetClusterInfo())
    return {"nodes": info.nodes, "demands": info.demands or {}}


def publish_autoscaler_view(config: Config, address: str, view: bytes) -> None:
    """Publish (or, with b"", withdraw) an autoscaler's view without joining the cluster."""
    from raylite._core import protocol as P
    from raylite._core.cluster.driver import run_head_request

    hostport, token = head_target(config, address)
    run_head_request(hostport, token, P.PublishAutoscalerView(view))


def cluster_status(config: Config, address: str = "auto") -> dict:
    """Nodes, resources and demands as the head sees them (facts for `raylite status`)."""
    from raylite._core.cluster.driver import query_cluster

    hostport, token = head_target(config, address)
    nodes = query_cluster(hostport, token)
    alive = [n for n in nodes if n["alive"]]
    total: dict[str, int] = {}
    used: dict[str, int] = {}
    for n in alive:
        pub_total = _public(n["total"])
        R.add(total, pub_total)
        R.add(used, {k: v - n["available"].get(k, 0) for k, v in pub_total.items()})
    pending: list[dict] = []
    infeasible: list[dict] = []
    feasible: dict[tuple, bool] = {}  # per demand shape: a scan of the nodes, not one per demand
    for n in alive:
        for demand in n.get("pending", []):
            shape = tuple(sorted(demand.items()))
            if shape not in feasible:
                feasible[shape] = any(R.fits(demand, m["total"]) for m in alive)
            (pending if feasible[shape] else infeasible).append(demand)
    return {"address": hostport, "nodes": nodes, "total": total, "used": used,
            "pending": pending, "infeasible": infeasible, "groups": waiting_group_lines(hostport, token, alive),
            "notices": cluster_notices(hostport, token),
            "autoscaler": autoscaler_view(hostport, token)}


def waiting_group_lines(hostport: str, token: str, alive: list[dict]) -> list[str]:
    """One line per placement group that waits for its bundles (what it needs, which nodes
    lack it); a group's bundles are no task demand, so they showed nowhere before."""
    from raylite._core import placement_wait as PW
    from raylite._core import protocol as P
    from raylite._core import scheduling as S
    from raylite._core.cluster.driver import run_head_request

    try:
        groups = run_head_request(hostport, token, P.ListPlacementGroups()).groups
    except Exception:  # noqa: BLE001 - extra: status shows the rest without it
        return []
    views = [S.NodeView(n["node_id"], n["total"], n["available"]) for n in alive]
    return [PW.describe_wait(g, views) for g in PW.waiting_groups(groups)]


def autoscaler_view(hostport: str, token: str) -> dict | None:
    """The view an autoscaler published in the head's KV (raylite.autoscaler), or None."""
    from raylite._core import protocol as P
    from raylite._core.cluster.driver import run_head_request

    try:
        raw = run_head_request(hostport, token, P.GetAutoscalerView()).value
        return json.loads(raw) if raw else None
    except Exception:  # noqa: BLE001 - extra: status shows the rest without it
        return None


def format_autoscaler(view: dict) -> list[str]:
    """`raylite status` lines for the autoscaler: pending launches, idle nodes, unmet demands."""
    age = max(0.0, time.time() - float(view.get("time") or 0))
    lines = [f"Autoscaler (view of {age:.0f}s ago, idle timeout {view.get('idle_timeout_s', 0):g}s)"]
    launches = {k: v for k, v in (view.get("pending_launches") or {}).items() if v}
    lines.append("  pending launches: " + (", ".join(f"{n} {k}" for k, n in sorted(launches.items())) or "none"))
    if view.get("provider_busy"):
        lines.append("  waiting for the provider to finish the last scale-down")
    for w in view.get("workers") or []:
        state = w["status"] if w["status"] != "running" else (f"idle {w['idle_s']:g}s" if w.get("idle_s") else "busy")
        lines.append(f"  {w['node_type']}  {w['node_id']}  {state}")
    for name in view.get("terminating") or []:
        lines.append(f"  terminating idle node {name}")
    for item in [*(view.get("infeasible") or []), *(view.get("capped") or [])]:
        lines.append(f"  cannot meet {item['demand']}: {item['reason']}")
    return lines


NOTICE_NAMESPACE = "raylite_status"  # KV: key -> JSON {"text", "job_id"}; written by libraries (Data)


def cluster_notices(hostport: str, token: str, limit: int = 20) -> list[str]:
    """Warnings that running jobs left for `raylite status` (e.g. a dataset whose tasks wait for
    CPUs its Train run's workers hold); a notice of a job that has ended is not shown."""
    from raylite._core import protocol as P
    from raylite._core.cluster.driver import run_head_request

    try:
        keys = run_head_request(hostport, token, P.KvKeys(NOTICE_NAMESPACE, b"")).value or []
        if not keys:
            return []
        alive = {j["job_id"].hex() for j in run_head_request(hostport, token, P.ListJobs()).jobs if j.get("alive")}
        out = []
        for key in sorted(keys)[:limit]:
            raw = run_head_request(hostport, token, P.KvGet(NOTICE_NAMESPACE, key)).value
            notice = json.loads(raw) if raw else {}
            if notice.get("text") and notice.get("job_id") in alive:
                out.append(str(notice["text"]))
        return out
    except Exception:  # noqa: BLE001 - notices are extra: status shows the rest without them
        return []


def _public(res: dict) -> dict:
    return {k: v for k, v in res.items() if "_group_" not in k and not k.startswith("node:")}


def _describe(total: dict) -> str:
    res = R.from_fixed(_public(total))
    parts = [f"{k}: {v / 2**30:.1f} GiB" if k in ("memory", "object_store_memory") else f"{k}: {v:g}"
             for k, v in sorted(res.items())]
    return "{" + ", ".join(parts) + "}"


def _accelerators(total: dict) -> str:
    """' [2x A100]': a node's accelerators by type, as its `accelerator_type:` resources say."""
    types = [k.split(":", 1)[1] for k in total if k.startswith("accelerator_type:")]
    if not types:
        return ""
    gpus = R.from_fixed({"GPU": total.get("GPU", 0)})["GPU"]
    count = f"{gpus:g}x " if gpus else ""
    return f" [{count}{'/'.join(sorted(types, key=len))}]"


def format_status(st: dict) -> str:
    lines = [f"======== raylite cluster status ({st['address']}) ========", "Node status"]
    alive = [n for n in st["nodes"] if n["alive"]]
    dead = [n for n in st["nodes"] if not n["alive"]]
    lines.append(f" Active: {len(alive)}")
    for n in alive:
        head = " (head)" if "node:__internal_head__" in n["total"] else ""
        lines.append(f"  {n['node_id'].hex()[:12]}  {n['ip']}{head}{_accelerators(n['total'])}  "
                     f"{_describe(n['total'])}")
    lines.append(f" Dead: {len(dead)}")
    for n in dead:
        lines.append(f"  {n['node_id'].hex()[:12]}  {n['ip']}  ({n.get('death_cause') or 'dead'})")
    lines.append("Resources")
    tot = R.from_fixed(st["total"])
    use = R.from_fixed(st["used"])
    for k in sorted(tot):
        unit = " B" if k in ("memory", "object_store_memory") else ""
        if unit:
            lines.append(f"  {use.get(k, 0) / 2**30:.2f}/{tot[k] / 2**30:.2f} GiB {k}")
        else:
            lines.append(f"  {use.get(k, 0):g}/{tot[k]:g} {k}")
    lines.append("Demands")
    if not st["pending"] and not st["infeasible"] and not st.get("groups"):
        lines.append("  (no resource demands)")
    for text in st.get("groups") or []:
        lines.append(f"  {text}")
    for d in st["pending"]:
        lines.append(f"  pending: {R.describe(_public(d) or d)}")
    for d in st["infeasible"]:
        lines.append(f"  infeasible (no node can ever fit it): {R.describe(_public(d) or d)}")
    if st.get("autoscaler"):
        lines.extend(format_autoscaler(st["autoscaler"]))
    if st.get("notices"):
        lines.append("Warnings")
        lines.extend(f"  {text}" for text in st["notices"])
    return "\n".join(lines)
