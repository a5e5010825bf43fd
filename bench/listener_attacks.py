"""What a stranger costs a raylite head: the two attacks of issue 17 section 2, measured.

    PYTHONPATH=<tree> python bench/listener_attacks.py [--gib 1] [--bulk-conns 1000]

Starts a head as `raylite start --head` does (TCP, object transfer on), then:
(a) one connection to the head's RPC port sends the length prefix 0xFFFFFFFF and then up to
    --gib GiB of data: prints the head's RSS before, its peak during, and how many bytes it
    took before it closed the connection;
(b) --bulk-conns connections to the node's object-transfer port each send one byte (half of
    the token-length field) and stay silent: prints the node's thread count before and at its
    peak, and how many of the connections are still open after 10 s.
Run it once per code tree (PYTHONPATH) to compare; the load average is printed beside.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def status(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def huge_frame(host: str, port: int, gib: float, pid: int) -> dict:
    rss0 = status(pid, "VmRSS") / 1024
    sent = 0
    chunk = b"\0" * (4 << 20)
    t0 = time.monotonic()
    s = socket.create_connection((host, port), timeout=10)
    try:
        s.sendall(struct.pack(">I", 0xFFFFFFFF))
        while sent < gib * 2**30 and time.monotonic() - t0 < 60:
            s.sendall(chunk)
            sent += len(chunk)
    except OSError:
        pass
    peak_during = status(pid, "VmRSS") / 1024
    s.close()
    return {"rss_before_mib": round(rss0), "rss_after_send_mib": round(peak_during),
            "peak_rss_mib": round(status(pid, "VmHWM") / 1024), "bytes_taken_mib": round(sent / 2**20),
            "seconds": round(time.monotonic() - t0, 2)}


def half_open_bulk(host: str, port: int, n: int, pid: int) -> dict:
    threads0 = status(pid, "Threads")
    socks = []
    peak = threads0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, status(pid, "Threads"))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    for _ in range(n):
        try:
            s = socket.create_connection((host, port), timeout=10)
            s.sendall(b"\x00")
            socks.append(s)
        except OSError:
            pass
    time.sleep(10)
    stop.set()
    sampler.join()
    still = 0
    for s in socks:
        s.setblocking(False)
        try:
            still += bool(s.recv(1, socket.MSG_PEEK)) or 0
        except BlockingIOError:
            still += 1
        except OSError:
            pass
        s.close()
    return {"connections": len(socks), "threads_before": threads0, "threads_peak": peak,
            "still_open_after_10s": still}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--bulk-conns", type=int, default=1000)
    args = ap.parse_args()
    import raylite
    from raylite._core import config as config_mod
    from raylite._core.cluster import cluster as C
    from raylite._core.cluster.driver import query_cluster

    print(f"raylite from {os.path.dirname(raylite.__file__)}", file=sys.stderr)
    temp_dir = tempfile.mkdtemp(prefix="rlb", dir="/tmp")
    os.environ.pop("RAYLITE_TOKEN", None)
    cfg = config_mod.get_config().replace(temp_dir=temp_dir, token="")
    config_mod._CONFIG = cfg
    head = C.start_node(cfg, head=True, port=free_port(), node_ip="127.0.0.1", num_cpus=1)
    try:
        token = open(os.path.join(head.session_dir, "token")).read().strip()
        node = next(n for n in query_cluster(head.address, token) if n["alive"])
        host, port = head.address.rsplit(":", 1)
        a = huge_frame(host, int(port), args.gib, head.pid)
        print("(a) head RPC, 0xFFFFFFFF prefix then data:", a, flush=True)
        bh, bp = node["data_address"].rsplit(":", 1)
        b = half_open_bulk(bh, int(bp), args.bulk_conns, head.pid)
        print("(b) object transfer, half-open connections:", b, flush=True)
        print("load average", tuple(round(x, 1) for x in os.getloadavg()), "cores", os.cpu_count())
    finally:
        with contextlib.suppress(Exception):
            C.stop_nodes(cfg, grace_s=5)
        with contextlib.suppress(Exception):
            if head.process.poll() is None:
                os.killpg(head.pid, 9)
            head.process.wait(10)
        shutil.rmtree(temp_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
