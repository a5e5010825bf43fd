"""Entry point of a node daemon process (optionally with the head in the same process).

Run by the driver for a local cluster (`python -m raylite._core.cluster.daemon`) and
by `raylite start`. Prints one line "READY <json>" on stdout once it serves.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
from typing import Any

from raylite._core import resources as R
from raylite._core.cluster.creator_watch import watch_creator
from raylite._core.cluster.files import private_dir
from raylite._core.config import env_token, get_config
from raylite._core.ids import NodeID
from raylite._core.node import shm_files
from raylite._core.node.node import NodeDaemon
from raylite._core.node.worker_pool import WorkerPool
from raylite._core.transport.base import ConnectionBrokenError, HandshakeError
from raylite._core.transport.gate import raise_open_file_limit


def read_json_argument(text: str) -> Any:
    """A JSON argument as launch.json_argument wrote it: inline, or "@<file>" when too long."""
    if text.startswith("@"):
        with open(text[1:]) as f:
            return json.load(f)
    return json.loads(text)

def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="raylite-node")
    p.add_argument("--session-dir", required=True)
    p.add_argument("--head", action="store_true", help="also run the head in this process")
    p.add_argument("--head-address", default="", help="tcp://HOST:PORT of the head (worker nodes)")
    p.add_argument("--head-port", type=int, default=0, help="TCP port for the head (0: unix socket only)")
    p.add_argument("--head-bind", default="", help="address the head listens on (default: --ip)")
    p.add_argument("--bind", default="", help="address of the node's listeners for other machines "
                   "(the Ray Client server, health and metrics): the told IP, or 0.0.0.0")
    p.add_argument("--agent-port", type=int, default=0, help="port of the node's health server (0: none)")
    p.add_argument("--metrics-port", type=int, default=0, help="port of the node's metrics (0: none)")
    p.add_argument("--node-port", type=int, default=0)
    p.add_argument("--ip", default="127.0.0.1")
    p.add_argument("--resources", default="{}", help="JSON, fixed-point totals")
    p.add_argument("--labels", default="{}")
    p.add_argument("--token", default="")
    p.add_argument("--exit-with-creator", action="store_true")
    p.add_argument("--creator-pid", type=int, default=0, help="the driver that spawned this local node")
    p.add_argument("--node-id", default="")
    p.add_argument("--persist", default="", help="sqlite:PATH or redis://HOST:PORT (head only)")
    p.add_argument("--dashboard-host", default="127.0.0.1")
    p.add_argument("--dashboard-port", type=int, default=-1, help="head only; -1: no API server")
    p.add_argument("--dashboard-fallback", action="store_true", help="a taken port -> a free one, warned")
    p.add_argument("--dashboard-flag", default="--dashboard-port", help="named in the port-in-use error")
    return p.parse_args(argv)


def _fail(message: str, code: int = 2) -> None:
    """Tell the starting CLI why this node cannot run (it reads stdout for READY/ERROR)."""
    print("ERROR " + message, flush=True)
    sys.exit(code)


def _bound_tcp_socket(ip: str, port: int) -> socket.socket:
    """The node's TCP socket, bound now and listened on later: a port picked here and bound
    later could be taken meanwhile (by any outgoing connection's ephemeral port, say)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if port:  # a fixed port: as a restarted node, take it back from connections still closing;
        # a chosen one (0) is fresh, and without SO_REUSEADDR no other socket can share it
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((ip, port))
    except OSError as e:
        sock.close()
        _fail(f"cannot listen on {ip}:{port} for this node: {e.strerror or e}. Pick another --node-port "
              "(0 lets the system choose).")
    return sock


def main(argv: list[str] | None = None) -> None:
    args = parse(sys.argv[1:] if argv is None else argv)
    raise_open_file_limit()  # every listener of the node lives here: descriptors are its budget
    multi_node = bool(args.head_port or args.head_address)
    if multi_node:  # clients (driver, workers) on this node listen on TCP at this IP
        os.environ["RAYLITE_NODE_IP_ADDRESS"] = args.ip
    config = get_config()
    logging.basicConfig(level=getattr(logging, config.log_level, logging.WARNING),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    token = args.token or env_token() or config.token  # config: RAY_AUTH_TOKEN too
    # the driver process that spawned a local cluster's daemon (named by the driver itself: one
    # that died before this line leaves us reparented, and getppid() would name the new parent)
    # (--creator-pid alone: stop with that process, without a local cluster's other ties to it)
    creator_pid = args.creator_pid or (os.getppid() if args.exit_with_creator else 0)
    node_id = NodeID.from_hex(args.node_id) if args.node_id else NodeID.from_random()
    sockets = os.path.join(args.session_dir, "sockets")
    private_dir(sockets)
    node_address = f"unix://{os.path.join(sockets, 'node_' + node_id.hex()[:8])}"
    longest = os.path.join(sockets, "0" * 16)  # client sockets are named by 16 hex chars
    if len(longest.encode()) > 107:
        _fail(f"the session directory {args.session_dir} is too deep for unix sockets ({len(longest)} "
              "characters, the limit is 107); set RAYLITE_TEMP_DIR to a shorter path such as "
              "/tmp/raylite")
    # the zygote must be forked before any thread or event loop exists (and before the node's
    # TCP socket is opened, so that the zygote and its workers never hold it)
    pool_probe = WorkerPool(node_address, token, args.session_dir, lambda rec: None)
    pool_probe.fork_zygote()
    tcp_sock = _bound_tcp_socket(args.ip, args.node_port) if multi_node else None
    tcp_address = f"tcp://{args.ip}:{tcp_sock.getsockname()[1]}" if tcp_sock is not None else ""
    try:
        import uvloop  # type: ignore

        loop = uvloop.new_event_loop()
    except Exception:  # noqa: BLE001
        loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(_serve(args, config, token, node_id, node_address, tcp_address, pool_probe,
                                      creator_pid, tcp_sock))
    finally:
        pool_probe.shutdown()


async def _serve(args, config, token, node_id, node_address, tcp_address, pool, creator_pid: int = 0,
                 tcp_sock: socket.socket | None = None) -> None:
    head = None
    head_address = args.head_address
    if args.head:
        from raylite._core.head.head import Head
        from raylite._core.head.persistence import open_persistence

        try:
            persist = open_persistence(args.persist, redis_username=config.redis_username,
                                       redis_password=config.redis_password,
                                       namespace=config.persist_namespace)
        except Exception as e:  # noqa: BLE001
            _fail(f"cannot open the head's persistence store {args.persist!r}: {e}")
        head = Head(config, token, persist=persist)
        head_unix = f"unix://{os.path.join(args.session_dir, 'sockets', 'head')}"
        await head.listen(head_unix)
        head_address = head_unix
        if args.head_port:
            try:
                await head.listen(f"tcp://{args.head_bind or args.ip}:{args.head_port}")
            except OSError as e:
                _fail(f"cannot listen on {args.head_bind or args.ip}:{args.head_port}: {e.strerror or e}. Is a raylite "
                      "head already running there? Stop it with `raylite stop`, or pick another "
                      "port with --port.")
            # every node, the head's own included, and every client use the TCP address,
            # so they find a restarted head at the same place
            head_address = f"tcp://{args.ip}:{args.head_port}"
    dashboard = _bind_dashboard(args) if head is not None else None
    ray_client = _start_ray_client_server(args, config, token, head_address) if head is not None else None
    resources = read_json_argument(args.resources)
    if not any(k.startswith("node:") and k != "node:__internal_head__" for k in resources):
        resources.update(R.to_fixed({f"node:{args.ip}": 1}))  # Ray's per-node resource, as `raylite start` gives it
    node = NodeDaemon(config, node_id=node_id, ip=args.ip, resources=resources,
                      labels=read_json_argument(args.labels), session_dir=args.session_dir, token=token,
                      head_address=head_address, address=node_address, tcp_address=tcp_address,
                      tcp_sock=tcp_sock, exit_with_creator=args.exit_with_creator)
    node.adopt_pool(pool)
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))
    if creator_pid:  # a local cluster lives as long as the driver process, not the thread, that made it
        watch_creator(loop, creator_pid, lambda: stop.done() or stop.set_result(None))
    health = await _start_health(args, node, head, token)  # answers "not ready" until registered
    try:
        await _start_or_clean_up(node)
    except HandshakeError as e:
        _fail(str(e))
    except ConnectionBrokenError as e:
        hostport = head_address[len("tcp://"):]
        _fail(f"cannot reach the head at {hostport} ({e.__cause__ or e}). Check the address, that the "
              f"head runs (`raylite status` on its machine) and that TCP port {hostport.rsplit(':', 1)[-1]} "
              "on it is open from this machine.")
    except RuntimeError as e:
        _fail(str(e))
    with contextlib.suppress(OSError):  # a creator that already exited closed the pipe
        print("READY " + json.dumps({"head_address": head_address, "node_address": node_address,
                                     "node_tcp_address": tcp_address, "node_id": node.node_id.hex(),
                                     "pid": os.getpid(), **_dashboard_info(dashboard),
                                     "ray_client_port": ray_client.port if ray_client else 0}), flush=True)
    with contextlib.suppress(Exception):
        sys.stdout.close()
        os.close(1)
        os.open(os.devnull, os.O_WRONLY)
    node.prestart_workers()
    lazy = None
    if dashboard is not None:
        from raylite._core.head.dashboard_process import LazyServer

        lazy = LazyServer(dashboard[0], head_address=head_unix, session_dir=args.session_dir, token=token,
                          node_id=node.node_id.hex(), cluster_address=head_address)
        lazy.arm()
        with contextlib.suppress(OSError):  # raylite's HTTP clients find a local cluster's API here
            with open(os.path.join(args.session_dir, "dashboard_url"), "w") as f:
                f.write(_dashboard_info(dashboard)["dashboard_url"])
    _after_ready(args, config)
    waiter = loop.create_task(node.stopped.wait())
    await asyncio.wait([waiter, stop], return_when=asyncio.FIRST_COMPLETED)
    if lazy is not None:
        await lazy.stop()
    for server in health:
        server.close()
    if ray_client is not None:
        ray_client.close()
    node.stop()
    if head is not None:
        head.close()


async def _start_health(args, node: NodeDaemon, head, token: str) -> list:
    """The node's health server (`--agent-port`, KubeRay's probes) and metrics (`--metrics-port`)."""
    if not (args.agent_port or args.metrics_port):
        return []
    from raylite._core.node import health as node_health

    checks = node_health.NodeChecks(node, head)
    servers = []
    for port, kind in ((args.agent_port, "health"), (args.metrics_port, "metrics")):
        if not port:
            continue
        try:
            servers.append(await node_health.serve(checks, _probe_hosts(args), port, kind=kind, token=token))
        except OSError as e:
            shm_files.destroy(node.store)  # it never served: leave no store directory behind
            flag = "--dashboard-agent-listen-port" if kind == "health" else "--metrics-export-port"
            _fail(f"cannot listen on port {port} for the node's {kind} server: {e.strerror or e}. "
                  f"Pick another {flag}.")
    return servers


def _bind(args) -> str:
    return args.bind or args.head_bind or "0.0.0.0"


def _probe_hosts(args) -> list[str]:
    """The health and metrics ports: the node's bind address and, when that is one IP (not
    loopback), 127.0.0.1 too, as Ray's agent does, so KubeRay's `wget localhost:52365` probes
    still reach it."""
    bind = _bind(args)
    if bind in ("0.0.0.0", "::") or bind.startswith("127."):
        return [bind]
    return [bind, "127.0.0.1"]


def _start_ray_client_server(args, config, token, head_address):
    """The head's Ray Client server (client_server.py), or None when it is off."""
    from raylite._core.ray_client.server import start_for_head

    try:
        return start_for_head(config, token=token, head_address=head_address, session_dir=args.session_dir,
                              multi_node=bool(args.head_port), bind=_bind(args))
    except OSError as e:
        _fail(str(e.strerror or e))


def _bind_dashboard(args):
    """Bind the API server's port now (a taken port fails the start); None when it is off."""
    if args.dashboard_port < 0:
        return None
    from raylite._core.head.dashboard_process import DashboardPortInUse, bind

    try:
        return bind(args.dashboard_host, args.dashboard_port, fallback=args.dashboard_fallback,
                    flag=args.dashboard_flag)
    except DashboardPortInUse as e:
        _fail(str(e))
    except OSError as e:
        _fail(f"cannot listen for the dashboard on {args.dashboard_host}:{args.dashboard_port}: {e}. "
              f"Check {args.dashboard_flag} and --dashboard-host.")


def _dashboard_info(dashboard) -> dict:
    if dashboard is None:
        return {}
    from raylite._core.head.dashboard_process import url_of

    sock, warning = dashboard
    return {"dashboard_url": url_of(sock), "dashboard_warning": warning}


def _after_ready(args, config) -> None:
    """Housekeeping off the start-up path: mark this session live, prune old sessions."""
    from raylite._core.cluster import sessions

    with contextlib.suppress(Exception):
        sessions.mark_live(args.session_dir)
        sessions.prune(config.temp_dir, config.sessions_to_keep, keep=args.session_dir)


async def _start_or_clean_up(node: NodeDaemon) -> None:
    try:
        await node.start()
    except BaseException:
        shm_files.destroy(node.store)  # it never served: leave no store directory behind
        raise


if __name__ == "__main__":
    main()
