"""Which network interface and address a node's collective libraries must use.

gloo, NCCL and vLLM pick their own address by resolving the host name. In containers and on
many clouds (and on raylite's network-namespace test hosts) the host name does not resolve, or
resolves to an address other than the one the cluster uses; gloo then falls back to loopback
and every peer on another host is refused. The node's cluster address is known (the node
daemon registered it), so the interface holding it is the one to name: this module finds it
and builds the environment Train's process groups and vLLM's engine ranks start with.
Variables the user set already are never replaced.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Mapping

# The variables naming an interface: gloo (torch.distributed's CPU backend), NCCL, and
# tensorpipe (torch RPC). They take an interface name, not an address.
IFNAME_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME")


def interface_for_ip(ip: str) -> str | None:
    """The name of the local interface that holds `ip` ('lo' for 127.0.0.1), or None where no
    interface of this machine holds it (then the libraries are left to choose)."""
    try:
        wanted = ipaddress.ip_address(ip)
    except ValueError:
        return None
    import psutil

    loopback: str | None = None
    for name, addrs in psutil.net_if_addrs().items():
        for addr in addrs:
            if addr.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            try:
                have = ipaddress.ip_address(addr.address.split("%", 1)[0])
            except ValueError:
                continue
            if have == wanted:
                return name
            if have.is_loopback and loopback is None:
                loopback = name
    # 127.0.0.2 and the like: held by the loopback interface's whole 127/8 route
    return loopback if wanted.is_loopback else None


def collective_env(node_ip: str, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The variables a process on the node with cluster address `node_ip` needs so that gloo,
    NCCL and vLLM use that address: the interface holding it for each *_SOCKET_IFNAME, and
    VLLM_HOST_IP. A variable already set in `environ` is left out (the user's choice stands);
    nothing is named for an address no local interface holds."""
    env: dict[str, str] = {}
    ifname = interface_for_ip(node_ip) if node_ip else None
    if ifname is not None:
        for var in IFNAME_VARIABLES:
            if not environ.get(var):
                env[var] = ifname
    if node_ip and not environ.get("VLLM_HOST_IP"):
        env["VLLM_HOST_IP"] = node_ip
    return env
