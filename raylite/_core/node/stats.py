"""A node's machine and worker statistics for its load reports (dashboard, /metrics).

The node daemon sends these to the head every `interval_s` inside its heartbeat, so the
head (and through it the dashboard) sees every machine without a scrape per node. One
sample costs a few psutil calls: the machine's CPU % and memory, and for each worker
process its CPU % (since the previous sample) and resident memory. GPUs are read with
`nvidia-smi` only where one exists, and at most every `gpu_interval_s` (it is a process
start); a machine without GPUs reports none rather than zeros.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from typing import Any


def host_id() -> str:
    """Which machine this is: nodes on one host (several daemons, network namespaces) share it,
    so machine figures (CPU, memory) are counted once per host, not once per node."""
    import socket

    machine = ""
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            with open(path) as f:
                machine = f.read().strip()
            break
        except OSError:
            continue
    try:
        import psutil

        boot = int(psutil.boot_time())
    except Exception:  # noqa: BLE001
        boot = 0
    return f"{machine or socket.gethostname()}:{boot}"


class NodeStats:
    """Samples the machine; `sample()` returns a msgpack-able dict or None when not due."""

    def __init__(self, interval_s: float = 2.0, gpu_interval_s: float = 5.0, max_sampled: int = 64) -> None:
        self.interval_s = interval_s
        self.gpu_interval_s = gpu_interval_s
        # workers read per sample: a node with thousands of actors refreshes them in turn
        # (each read costs two /proc files), reporting the last figures of the others
        self.max_sampled = max_sampled
        self._cursor = 0
        self._figures: dict[int, tuple[float, int]] = {}  # pid -> last (cpu %, rss bytes)
        self._last = 0.0
        self._procs: dict[int, Any] = {}
        self._gpu_at = 0.0
        self._gpus: list[dict[str, Any]] = []
        self._gpu_procs: dict[int, int] = {}  # pid -> GPU memory in use, bytes
        self._smi = shutil.which("nvidia-smi")
        self._psutil: Any = None
        self._host_id = ""

    def due(self, now: float) -> bool:
        return now - self._last >= self.interval_s

    def sample(self, workers: list[dict[str, Any]], store: Any, now: float | None = None) -> dict[str, Any]:
        """Machine CPU/memory, object store use, GPUs, and CPU/RSS of each worker in `workers`
        (dicts with at least "pid"; other keys are copied through)."""
        now = time.monotonic() if now is None else now
        self._last = now
        if self._psutil is None:
            import psutil

            self._psutil = psutil
        ps = self._psutil
        vm = ps.virtual_memory()
        if not self._host_id:
            self._host_id = host_id()
        out: dict[str, Any] = {
            "time": time.time(),
            "host_id": self._host_id,
            "cpu_percent": ps.cpu_percent(None),
            "num_cpus": ps.cpu_count() or 1,
            "mem_total_bytes": int(vm.total),
            "mem_used_bytes": int(vm.total - vm.available),
            "store_used_bytes": int(getattr(store, "used_bytes", 0)),
            "store_spilled_bytes": int(getattr(store, "spilled_bytes", 0)),
            "store_capacity_bytes": int(getattr(store, "capacity_bytes", 0)),
            "workers": self._workers(workers),
        }
        gpus = self._gpu_sample(now)
        if gpus:
            out["gpus"] = gpus
            for w in out["workers"]:
                if w["pid"] in self._gpu_procs:
                    w["gpu_mem_bytes"] = self._gpu_procs[w["pid"]]
        return out

    def _workers(self, workers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        ps = self._psutil
        live = [w for w in workers if w.get("pid")]
        refresh = self._window(live)
        seen: set[int] = set()
        rows = []
        for w in live:
            pid = int(w["pid"])
            seen.add(pid)
            if pid not in refresh:
                cpu, rss = self._figures.get(pid, (0.0, 0))
                rows.append({**w, "cpu_percent": cpu, "rss_bytes": rss})
                continue
            proc = self._procs.get(pid)
            try:
                if proc is None:
                    proc = self._procs[pid] = ps.Process(pid)
                    proc.cpu_percent(None)  # the first call only starts the measurement
                    cpu = 0.0
                else:
                    cpu = proc.cpu_percent(None)
                rss = int(proc.memory_info().rss)
            except (ps.NoSuchProcess, ps.AccessDenied, ps.ZombieProcess):
                self._procs.pop(pid, None)
                self._figures.pop(pid, None)
                continue
            self._figures[pid] = (cpu, rss)
            rows.append({**w, "cpu_percent": cpu, "rss_bytes": rss})
        for pid in set(self._procs) - seen:
            del self._procs[pid]
        for pid in set(self._figures) - seen:
            del self._figures[pid]
        return rows

    def _window(self, live: list[dict[str, Any]]) -> set[int]:
        """The pids read this time: all of them, or the next `max_sampled` in turn."""
        if len(live) <= self.max_sampled:
            return {int(w["pid"]) for w in live}
        start = self._cursor % len(live)
        picked = live[start:start + self.max_sampled]
        picked += live[:self.max_sampled - len(picked)]
        self._cursor = start + self.max_sampled
        return {int(w["pid"]) for w in picked}

    def _gpu_sample(self, now: float) -> list[dict[str, Any]]:
        if self._smi is None:
            return []
        if now - self._gpu_at < self.gpu_interval_s:
            return self._gpus
        self._gpu_at = now
        try:
            text = subprocess.run(
                [self._smi, "--query-gpu=index,name,utilization.gpu,memory.used,memory.total",
                 "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=5, check=True,
            ).stdout
            self._gpus = parse_nvidia_smi(text)
            apps = subprocess.run(
                [self._smi, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                capture_output=True, text=True, timeout=5, check=True).stdout if self._gpus else ""
            self._gpu_procs = parse_compute_apps(apps)
        except (OSError, subprocess.SubprocessError):
            self._gpus, self._gpu_procs = [], {}
        return self._gpus


def parse_nvidia_smi(text: str) -> list[dict[str, Any]]:
    """Rows of `nvidia-smi --query-gpu=index,name,utilization.gpu,memory.used,memory.total
    --format=csv,noheader,nounits` (memory in MiB) as dicts with bytes."""
    gpus = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 5:
            continue
        try:
            gpus.append({"index": int(parts[0]), "name": parts[1],
                         "utilization_percent": float(parts[2]),
                         "mem_used_bytes": int(float(parts[3]) * 2**20),
                         "mem_total_bytes": int(float(parts[4]) * 2**20)})
        except ValueError:
            continue
    return gpus


def parse_compute_apps(text: str) -> dict[int, int]:
    """`nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits` (MiB)
    as {pid: bytes}; a process on several GPUs adds up."""
    out: dict[int, int] = {}
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        try:
            pid, mib = int(parts[0]), float(parts[1])
        except (ValueError, IndexError):
            continue
        out[pid] = out.get(pid, 0) + int(mib * 2**20)
    return out
