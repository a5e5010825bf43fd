"""Which IP is this machine's address, as other machines reach it (no flag, no default route).

A Kubernetes pod is told nothing: KubeRay starts `ray start --address=<head service>:6379`
with no `--node-ip-address`, and a pod network may have no default route. So the address is
found the way Ray finds it, most specific first:

1. the route towards the head: a UDP socket `connect()`ed to the head's address (no packet
   is sent) is given the source address the kernel would use to reach it;
2. the route towards the rest of the network (the default route), the same way;
3. the host name's own resolution (a pod's /etc/hosts maps its host name to its IP);
4. the first non-loopback IPv4 address of an interface that is up;
5. 127.0.0.1, when the machine has no other address.

A loopback answer from 1 or 2 is not an address other machines reach, so the search goes on.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket

LOOPBACK = "127.0.0.1"


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _route_towards(host: str, port: int) -> str | None:
    """The source IP the kernel picks to reach host:port (a UDP connect sends nothing)."""
    with contextlib.suppress(OSError, UnicodeError):
        target = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_DGRAM)[0][4]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(target)
            ip = s.getsockname()[0]
            if ip and ip != "0.0.0.0":
                return str(ip)
    return None


def _from_hostname() -> str | None:
    with contextlib.suppress(OSError, UnicodeError):
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET, socket.SOCK_STREAM):
            ip = str(info[4][0])
            if not is_loopback(ip):
                return ip
    return None


def interface_ips() -> list[str]:
    """Non-loopback IPv4 addresses of this machine's interfaces that are up (in this network
    namespace: a pod or a netns host sees only its own)."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a core dependency
        return []
    out: list[str] = []
    with contextlib.suppress(Exception):
        stats = psutil.net_if_stats()
        for name, addrs in sorted(psutil.net_if_addrs().items()):
            if name in stats and not stats[name].isup:
                continue
            for a in addrs:
                if a.family == socket.AF_INET and not is_loopback(a.address):
                    out.append(a.address)
    return out


def detect_node_ip(toward: str = "") -> str:
    """This machine's IP as other machines reach it; `toward` is the head's HOST[:PORT] if known."""
    if toward:
        host, _, port = toward.rpartition(":") if ":" in toward else (toward, "", "")
        ip = _route_towards(host or toward, int(port) if port.isdigit() else 6379)
        if ip and not is_loopback(ip):
            return ip
    for candidate in (_route_towards("10.255.255.255", 1), _from_hostname()):
        if candidate and not is_loopback(candidate):
            return candidate
    ips = interface_ips()
    return ips[0] if ips else LOOPBACK


def local_ips() -> set[str]:
    """Every address that names this machine: its interfaces' and loopback."""
    return {LOOPBACK, *interface_ips()}
