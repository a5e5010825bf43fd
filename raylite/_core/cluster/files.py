"""Files a running multi-node cluster leaves on a machine, and what reads them.

`raylite start` writes, under the temp dir (RAYLITE_TEMP_DIR, default
/tmp/raylite-sessions):
- `current_cluster.json`: the head's address and where its token file is, so
  `raylite.init(address="auto")`, `raylite status` and `raylite start --address` on the
  head's machine need no flags;
- per node session dir: `node.json` (pid, host name, role, addresses) so `raylite stop`
  finds exactly raylite's own processes, and `token` (mode 0600) on the head.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import socket
from dataclasses import dataclass

from raylite._core.private_paths import owned_dir

ADDRESS_FILE = "current_cluster.json"
NODE_FILE = "node.json"


def address_file(temp_dir: str) -> str:
    return os.path.join(temp_dir, ADDRESS_FILE)


def write_private(path: str, text: str) -> None:
    """Write a file only this user can read (tokens)."""
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    with open(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


def private_dir(path: str) -> str:
    """Create `path` (or tighten it) to mode 0700, for the session's `sockets` directory: a
    Unix socket inside is reachable by no other user, not even between bind() and chmod().
    Another user's folder at that path is refused (private_paths.owned_dir)."""
    return owned_dir(path)


def write_address_file(temp_dir: str, address: str, token_file: str, session_dir: str,
                       dashboard_url: str = "", bind: str = "") -> None:
    """`bind`: the interface the head listens on ("0.0.0.0": every one, so a loopback address
    with its port reaches this head and no other process)."""
    owned_dir(temp_dir, private=False)
    tmp = address_file(temp_dir) + f".{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump({"address": address, "token_file": token_file, "session_dir": session_dir,
                   "dashboard_url": dashboard_url, "bind": bind}, f)
    os.replace(tmp, address_file(temp_dir))


def read_address_file(temp_dir: str) -> dict | None:
    try:
        with open(address_file(temp_dir)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def running_cluster_address(temp_dir: str) -> str | None:
    """The address of the cluster `raylite start` left running on this machine, if its head
    daemon is still alive (init() with no address joins it, as Ray's does)."""
    info = read_address_file(temp_dir)
    if not info or not info.get("session_dir"):
        return None
    try:
        with open(os.path.join(info["session_dir"], NODE_FILE)) as f:
            pid = json.load(f).get("pid", 0)
    except (OSError, ValueError):
        return None
    return info.get("address") if _is_node_daemon(pid, info["session_dir"]) else None


def normalize_address(address: str) -> str:
    """'HOST:PORT', 'raylite://HOST:PORT', 'ray://...' or 'tcp://...' -> 'HOST:PORT'."""
    if address.startswith(("http://", "https://")):
        raise ValueError(
            f"cluster address {address!r} is the API server's URL (for `job` commands, the state API "
            "and the dashboard), not the cluster's: connect with the head's HOST:PORT (--port, 6379 by "
            "default), 'auto' on a cluster machine, or 'ray://HOST:10001' from elsewhere. (RAY_ADDRESS "
            "set to an http:// URL for `ray job submit` is read by init() too.)")
    for prefix in ("raylite://", "ray://", "tcp://"):
        if address.startswith(prefix):
            address = address[len(prefix):]
    address = address.rstrip("/")
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"cluster address {address!r} is not HOST:PORT (e.g. 10.0.0.5:6379), "
                         "'raylite://HOST:PORT' or 'auto'")
    return address


def resolve(address: str, temp_dir: str, token: str = "") -> tuple[str, str]:
    """Return (HOST:PORT, token) for an init/CLI address; 'auto' reads the address file."""
    info = read_address_file(temp_dir)
    if address == "auto":
        if info is None:
            raise ConnectionError(
                f"address='auto' found no running raylite cluster on this machine (no "
                f"{address_file(temp_dir)}). Start one with `raylite start --head`, or pass "
                "address='HOST:PORT'.")
        address = info["address"]
    address = normalize_address(address)
    if not token and info is not None and _same_local_head(info, address):
        with contextlib.suppress(OSError):
            with open(info["token_file"]) as f:
                token = f.read().strip()
    return address, token


_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


def _same_local_head(info: dict, address: str) -> bool:
    """Whether `address` names the head `raylite start` registered on this machine (its token
    is then sent there): the same HOST:PORT, or a loopback name with the same port where the
    head is itself on loopback or listens on every interface, so nothing else can hold that
    port (Ray's examples say `ray.init(address="localhost:6379")` or `127.0.0.1:6379`)."""
    registered = info.get("address", "")
    if not registered:
        return False
    if registered == address:
        return True
    host, _, port = address.rpartition(":")
    reg_host, _, reg_port = registered.rpartition(":")
    return (host in _LOOPBACK_HOSTS and port == reg_port
            and (reg_host in _LOOPBACK_HOSTS or info.get("bind") == "0.0.0.0"))


@dataclass
class NodeProcess:
    session_dir: str
    pid: int
    hostname: str
    head: bool
    address: str


def read_token(path: str) -> str:
    """The token in a head's token file, or "" where it cannot be read."""
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def local_head_token(unix_address: str) -> str:
    """The token of the local cluster whose head listens on `unix://<session>/sockets/head`."""
    session = os.path.dirname(os.path.dirname(unix_address[len("unix://"):]))
    return read_token(os.path.join(session, "token"))


def dashboard_link(url: str, token: str) -> str:
    """The dashboard URL a browser opens on the first click: `http://HOST:PORT/?token=...`
    (the server then moves the token into a cookie and drops it from the address bar)."""
    if not url:
        return ""
    url = url if "://" in url else "http://" + url
    return f"{url.rstrip('/')}/?token={token}" if token else url.rstrip("/")


def write_node_file(session_dir: str, pid: int, head: bool, address: str) -> None:
    with open(os.path.join(session_dir, NODE_FILE), "w") as f:
        json.dump({"pid": pid, "hostname": socket.gethostname(), "head": head, "address": address}, f)


def local_node_processes(temp_dir: str) -> list[NodeProcess]:
    """Node daemons started by `raylite start` on this host that are still running.

    A pid is trusted only if the process is raylite's node daemon for that very session
    directory (its command line says so), so a reused pid is never signalled.
    """
    out = []
    me = socket.gethostname()
    for path in glob.glob(os.path.join(temp_dir, "*", NODE_FILE)):
        try:
            with open(path) as f:
                d = json.load(f)
        except (OSError, ValueError):
            continue
        session_dir = os.path.dirname(path)
        if d.get("hostname") != me or not _is_node_daemon(d.get("pid", 0), session_dir):
            continue
        out.append(NodeProcess(session_dir, d["pid"], me, d.get("head", False), d.get("address", "")))
    return out


def _is_node_daemon(pid: int, session_dir: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return b"raylite._core.cluster.daemon" in argv and session_dir.encode() in argv


def local_ip_towards(host: str, port: int) -> str:
    """The IP this machine uses to reach host (no packet is sent)."""
    with contextlib.suppress(OSError):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, port))
            return s.getsockname()[0]
    return "127.0.0.1"
