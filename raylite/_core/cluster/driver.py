"""init(): start a local cluster (head + node in one daemon process) or join a running one.

The daemon is started with `python -m raylite._core.cluster.daemon` and reports
"READY {...}" on stdout. With a local cluster the daemon exits when this driver
disconnects, so a crashed driver leaves nothing behind.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import subprocess
import sys
import threading
from dataclasses import dataclass

from raylite._core import protocol as P
from raylite._core import runtime
from raylite._core.client import progress_bars
from raylite._core.client.core_client import CoreClient
from raylite._core.cluster import launch
from raylite._core.config import Config, env_ignore_unhandled_errors, get_config, job_submission_id
from raylite._core.ids import JobID, WorkerID
from raylite._core.node import process_tree
from raylite._core.private_paths import owned_dir
from raylite._core.protocol import RegisterJob
from raylite._core.transport.base import ConnectionBrokenError

CLUSTER_FILE = "current_cluster.json"


detect_resources = launch.detect_resources  # used by `raylite start`


@dataclass
class DriverInfo:
    session_dir: str
    process: subprocess.Popen | None
    node_address: str
    head_address: str
    node_id: str
    token: str
    namespace: str
    job_id: bytes
    local: bool
    log_to_driver: bool
    dashboard_url: str = ""
    node_sys_path: tuple[str, ...] = ()  # what a local node's workers import from already
    ray_client: bool = False  # connected through `ray://` (its calls run in a proxy on the head)


def start_local(config: Config, *, num_cpus, num_gpus, resources, namespace: str,
                object_store_memory: int | None, log_to_driver: bool, labels: dict | None = None,
                include_dashboard: bool | None = None, dashboard_host: str | None = None,
                dashboard_port: int | None = None, system_config: dict | None = None) -> DriverInfo:
    dashboard = launch.dashboard_args(config, include_dashboard, dashboard_host, dashboard_port)
    key = launch.node_key(num_cpus, num_gpus, resources, object_store_memory, labels, dashboard,
                          system_config)
    node = launch.take_prestarted(key) or launch.spawn_node(
        config, num_cpus=num_cpus, num_gpus=num_gpus, resources=resources,
        object_store_memory=object_store_memory, labels=labels, dashboard=dashboard,
        system_config=system_config)
    info = launch.wait_ready(node)
    if info.get("dashboard_warning"):
        import warnings

        warnings.warn(info["dashboard_warning"], stacklevel=user_stacklevel())
    return DriverInfo(node.session_dir, node.process, info["node_address"], info["head_address"],
                      info["node_id"], node.token, namespace, JobID.from_random(), True, log_to_driver,
                      info.get("dashboard_url", ""), node.sys_path)


def user_stacklevel() -> int:
    """warnings.warn's stacklevel that names the user's line: the first caller outside raylite
    (init() is reached from init(), from a first .remote(), from ray.get(), ...)."""
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
    frame, level = sys._getframe(1), 2  # 2: the caller of user_stacklevel's caller
    while frame is not None and frame.f_back is not None:
        if not os.path.abspath(frame.f_code.co_filename).startswith(package):
            break
        frame, level = frame.f_back, level + 1
    return max(level - 1, 1)


def connect_client(config: Config, info: DriverInfo) -> CoreClient:
    client = CoreClient(config, worker_id=WorkerID.from_random(), kind="driver", job_id=info.job_id,
                        node_address=info.node_address, token=info.token, session_dir=info.session_dir,
                        namespace=info.namespace)
    client.start()
    if info.log_to_driver:
        client.log_handler = _print_worker_output
    client.objects.unhandled_error_hook = report_unhandled_error
    client.head_request(RegisterJob(info.job_id, client.address, info.namespace, " ".join(sys.argv),
                                    job_submission_id(), os.getpid()))
    return client


def report_unhandled_error(payload: object) -> None:
    """A task's error that no get() read before its last ref went: said, as Ray says it, so a
    fire-and-forget task's failure is not lost silently. RAY_IGNORE_UNHANDLED_ERRORS=1 (or
    RAYLITE_IGNORE_UNHANDLED_ERRORS=1) keeps quiet; a cancellation the program asked for is not
    reported. `ray._private.worker._unhandled_error_handler`, when a program replaced it, gets the
    error instead of the log."""
    if env_ignore_unhandled_errors():
        return
    from raylite import exceptions as E
    from raylite._core import serialization as ser

    err = ser.from_inline(payload)
    if isinstance(err, E.TaskCancelledError):
        return
    handler = getattr(sys.modules.get("raylite._private.worker"), "_unhandled_error_handler", None)
    (handler or log_unhandled_error)(err)


def log_unhandled_error(err: BaseException) -> None:
    """The default report of an unhandled error: one log record on the driver's stderr."""
    import logging

    logging.getLogger("raylite").error("Unhandled error (suppress with 'RAY_IGNORE_UNHANDLED_ERRORS=1'): %s", err)


def _print_worker_output(msg) -> None:
    """Print a worker's lines with their prefix; bar states go to the progress board. A line
    the driver's stream refuses (closed, replaced) is skipped alone: the lines after it, bars
    among them, are still shown."""
    stream = sys.stderr if msg.stream == "stderr" else sys.stdout
    for line in msg.lines:
        try:
            if progress_bars.BOARD.handle_line(msg.prefix, line):
                continue  # a tqdm_ray bar's state: drawn by the board, not printed
            stream.write(f"{msg.prefix}{line}\n")
        except Exception:  # noqa: BLE001
            pass
    with contextlib.suppress(Exception):
        stream.flush()


_lock = threading.Lock()


def init_local(**kwargs) -> DriverInfo:
    config = get_config()
    info = start_local(config, **kwargs)
    try:
        client = connect_client(config, info)
    except BaseException:
        info.process.kill()
        raise
    runtime.set_driver(client, info)
    atexit.register(shutdown)
    return info


def shutdown() -> None:
    with _lock:
        client = runtime.client()
        info = runtime.driver()
        if client is None or info is None:
            return
        runtime.clear()
        client.shutdown()
        proc = info.process
        if proc is not None:
            tag = process_tree.node_tag(proc.pid)
            try:
                proc.wait(2.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(2.0)
            if tag:  # the node sweeps its workers' processes; this is for a node that could not
                with contextlib.suppress(Exception):
                    process_tree.kill_node_processes(tag)
        import shutil

        from raylite._core.cluster import sessions

        if info.local:  # the cluster's session: its logs stay (sessions.py)
            sessions.retire(info.session_dir)
        elif info.session_dir:  # this driver's private socket dir
            shutil.rmtree(info.session_dir, ignore_errors=True)


def init_remote(address: str, *, namespace: str, log_to_driver: bool) -> DriverInfo:
    """Join a cluster started by `raylite start`: attach to the node on this machine.

    The driver never stops that cluster: shutdown() (or exit) only disconnects it.
    """
    import tempfile

    from raylite._core.cluster import files as CF

    config = get_config()
    if address.startswith("unix://"):  # a local cluster's head (a submitted job's driver joins it so)
        hostport, token = address, config.token or CF.local_head_token(address)
        my_ip = config.node_ip_address or "127.0.0.1"
        nodes = query_cluster(hostport, token)
    else:
        hostport, token = CF.resolve(address, config.temp_dir, config.token)
        host, port = hostport.rsplit(":", 1)
        nodes = query_cluster(hostport, token)
        my_ip = config.node_ip_address or CF.local_ip_towards(host, int(port))
    candidates = local_nodes(nodes, my_ip)
    if not candidates and not config.node_ip_address:  # e.g. 127.0.0.1:6379 (KubeRay's RAY_ADDRESS
        # in the head pod) to a head listening on every interface: a node here has one of our IPs
        from raylite._core.node.ip import local_ips

        mine = local_ips()
        candidates = [n for ip in sorted(mine) for n in local_nodes(nodes, ip)]
    if not candidates:
        raise ConnectionError(
            f"the raylite cluster at {hostport} has no alive node on this machine (IP {my_ip}); drivers "
            f"attach to a local node. Start one here with `raylite start --address={hostport}` (and "
            "--node-ip-address if this machine has several IPs), or set RAYLITE_NODE_IP_ADDRESS.")
    private = tempfile.mkdtemp(prefix="driver_", dir=_ensure(config.temp_dir))
    for i, node in enumerate(candidates):  # a node the head still lists may have just died
        local = node.get("local_address", "")
        node_address = local if local and os.path.exists(local[len("unix://"):]) else node["address"]
        head_address = hostport if hostport.startswith("unix://") else f"tcp://{hostport}"
        info = DriverInfo(private, None, node_address, head_address, node["node_id"].hex(), token,
                          namespace, JobID.from_random(), False, log_to_driver)
        try:
            client = connect_client(config.replace(node_ip_address=node["ip"], token=token), info)
            break
        except ConnectionBrokenError:
            if i == len(candidates) - 1:
                raise
    found = CF.read_address_file(config.temp_dir)
    if found and found.get("address") == hostport:
        info.dashboard_url = found.get("dashboard_url", "")
    runtime.set_driver(client, info)
    atexit.register(shutdown)
    return info


def init_ray_client(address: str, *, namespace: str, log_to_driver: bool, runtime_env: dict) -> DriverInfo:
    """Connect through a head's Ray Client server (`ray://HOST:PORT`, client_remote.py): the
    calls of this program run in a proxy driver on the head, so only that port must be open."""
    from raylite._core.cluster import files as CF
    from raylite._core.ray_client.remote_client import RemoteClient

    config = get_config()
    hostport = CF.normalize_address(address)
    token = config.token
    found = CF.read_address_file(config.temp_dir)
    host = hostport.rsplit(":", 1)[0]
    if not token and found and (host in ("127.0.0.1", "localhost", "::1")
                                or found.get("address", "").rsplit(":", 1)[0] == host):
        token = CF.read_token(found.get("token_file", ""))  # the head `raylite start` ran on this machine
    client = RemoteClient(config, hostport, token)
    facts = client.start(namespace, runtime_env)
    if log_to_driver:
        client.log_handler = _print_worker_output
    info = DriverInfo("", None, "", facts["head_address"], facts["node_id"].hex(), token, facts["namespace"],
                      facts["job_id"], False, log_to_driver, facts.get("dashboard_url", ""), ray_client=True)
    runtime.set_driver(client, info)
    atexit.register(shutdown)
    return info


def _ensure(path: str) -> str:
    return owned_dir(path, private=False)


def local_nodes(nodes: list[dict], my_ip: str) -> list[dict]:
    """Nodes a driver on this machine may attach to: same IP, the head's node first."""
    mine = [n for n in nodes if n["alive"] and n["ip"] == my_ip]
    mine.sort(key=lambda n: "node:__internal_head__" not in n["total"])
    return mine


def query_cluster(hostport: str, token: str, timeout_s: float = 10.0) -> list[dict]:
    """Ask the head for its node table (a short connection on a helper thread's loop)."""
    return run_head_request(hostport, token, P.GetClusterInfo(), timeout_s).nodes


def run_head_request(hostport: str, token: str, msg, timeout_s: float = 10.0):
    import asyncio

    from raylite._core.transport import rpc
    from raylite._core.transport.base import ConnectionBrokenError, RemoteError

    async def ask():
        target = hostport if hostport.startswith("unix://") else f"tcp://{hostport}"
        try:
            conn = await rpc.connect(target, {}, token=token, role="cli", timeout_s=timeout_s)
        except ConnectionBrokenError as e:
            raise ConnectionError(
                f"cannot reach the raylite head at {hostport}: {e.__cause__ or e}. Check that the head "
                f"runs (`raylite start --head`) and that port {hostport.rsplit(':', 1)[1]} is open from "
                "this machine.") from None
        try:
            return await conn.request(msg, timeout_s)
        except RemoteError as e:
            if e.error_type != "NotImplementedError":
                raise
            raise ConnectionError(
                f"{hostport} answered, but it is not a raylite head: it is another raylite port (the "
                f"Ray Client port? connect to that with address='ray://{hostport}'). A driver on a "
                "cluster machine uses the head's --port (6379 by default).") from None
        finally:
            conn.close()

    result: list = []

    def run() -> None:
        try:
            result.append(("ok", asyncio.run(ask())))
        except BaseException as e:  # noqa: BLE001
            result.append(("err", e))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout_s + 5)
    if not result:
        raise ConnectionError(f"the raylite head at {hostport} did not answer within {timeout_s}s")
    kind, value = result[0]
    if kind == "err":
        raise value
    return value
