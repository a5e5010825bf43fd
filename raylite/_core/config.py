"""One frozen Config, read once; the only reader of RAYLITE_* environment variables."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass

_ENV_PREFIX = "RAYLITE_"


@dataclass(frozen=True)
class Config:
    # objects
    inline_threshold_bytes: int = 100 * 1024
    object_store_bytes: int = 0  # 0 = a fraction of RAM, decided by the node
    object_store_fraction: float = 0.3  # of RAM (or /dev/shm if smaller) when object_store_bytes is 0
    object_spill_bytes: int = 0  # room for spilled objects on disk; 0 = whatever the disk has free
    recycled_segment_idle_s: float = 10.0  # freed segments kept warm for reuse this long
    # workers and leases
    lease_idle_timeout_s: float = 0.5
    worker_start_timeout_s: float = 30.0
    # workers starting (forked, not yet registered) at once; more wait their turn. 0 = 4 per core
    worker_start_concurrency: int = 0
    # a worker closes its link to the head after this long without using it (thousands of idle
    # actors would otherwise hold thousands of the head's sockets); the next request reopens it
    worker_head_idle_s: float = 10.0
    # connections the node's socket queues before it accepts them (the kernel caps it at
    # net.core.somaxconn); clients retry with backoff when it is full
    listen_backlog: int = 4096
    max_tasks_in_flight_per_worker: int = 4
    prestart_workers: bool = True
    # modules imported into the worker template (zygote) before it forks workers, comma-separated;
    # unset = numpy plus whichever of torch/pyarrow/pandas the starting driver has imported
    preload_modules: str = ""
    # liveness
    heartbeat_interval_s: float = 0.5
    # a node whose heartbeats stop (cut link) is declared dead after this; a dropped TCP
    # connection (its processes died) is detected at once
    node_dead_timeout_s: float = 5.0
    # how long nodes and drivers keep trying to reach a restarted head before giving up
    head_reconnect_timeout_s: float = 60.0
    # multi-node: this machine's IP; clients listen on TCP there so other nodes reach them
    node_ip_address: str = ""
    # optional TLS for TCP links (mutual: every node, driver and worker presents this cert);
    # the CA defaults to the cert itself (one self-signed cert per cluster)
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_ca_file: str = ""
    # every listener (Core RPC, object transfer, Serve's direct channel): a new connection must
    # complete its handshake (TLS, then the token check) within this time, or it is closed
    handshake_timeout_s: float = 5.0
    # connections one listener holds that have not authenticated yet; more are refused (logged)
    max_pending_handshakes: int = 1024
    # the largest frame an authenticated peer may send (Core RPC, Serve's direct channel),
    # checked on the length prefix before anything is buffered; a runtime_env package
    # (up to 512 MiB) travels as one frame. Before the token check a peer may send 4 KiB.
    max_frame_bytes: int = 1024**3
    # infeasible requests are reported after this long without any node able to fit them
    infeasible_report_s: float = 0.0
    # memory monitor
    memory_usage_threshold: float = 0.95
    memory_monitor_interval_s: float = 0.25
    # session
    temp_dir: str = "/tmp/raylite-sessions"
    shm_dir: str = "/dev/shm"
    spill_dir: str = ""  # where full stores spill; "" = the session directory
    # credentials of the Redis server given to `--persist redis://HOST:PORT` (Ray's --redis-password)
    redis_username: str = ""
    redis_password: str = ""
    # address of a running cluster (RAYLITE_ADDRESS) and its token
    address: str = ""
    token: str = ""
    log_level: str = "WARNING"
    # the head's HTTP API server (jobs, state, logs, dashboard); started on its first request
    include_dashboard: bool = True
    dashboard_host: str = "127.0.0.1"
    dashboard_port: int = 8265
    # loopback clients may skip the token (off: every request carries it, as off loopback)
    dashboard_loopback_without_token: bool = False
    # session directories (and their logs) kept after their cluster stopped; older ones go
    sessions_to_keep: int = 10
    # task events: per-job cap (oldest dropped first, counted) and how often processes flush
    task_events_enabled: bool = True
    task_events_max_per_job: int = 10000
    task_events_flush_interval_s: float = 1.0
    # after a job's driver exits, its tasks still open this long later are closed as FAILED
    task_events_job_end_grace_s: float = 5.0
    # a stopped job's entrypoint gets SIGTERM, then SIGKILL after this
    job_stop_grace_s: float = 3.0
    # Ray Client server (ray://HOST:PORT) on a `raylite start --head` head: -1 = Ray's 10001,
    # skipped with a warning when taken; 0 = off; else that port (a taken one fails the start)
    ray_client_server_port: int = -1

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Config:
        env = os.environ if env is None else env
        values = {}
        for field in dataclasses.fields(cls):
            raw = env.get(_ENV_PREFIX + field.name.upper())
            if raw is None:
                continue
            default = field.default
            if isinstance(default, bool):
                values[field.name] = raw.lower() in ("1", "true", "yes", "on")
            elif isinstance(default, int):
                values[field.name] = int(raw)
            elif isinstance(default, float):
                values[field.name] = float(raw)
            else:
                values[field.name] = raw
        return cls(**values)

    def replace(self, **changes) -> Config:
        return dataclasses.replace(self, **changes)


# Ray's `init(_system_config={...})` keys that raylite honours: the Config field each sets, and
# the factor from Ray's unit to the field's (Ray counts the monitor's period in milliseconds).
_RAY_SYSTEM_CONFIG = {
    "memory_usage_threshold": ("memory_usage_threshold", 1.0),
    "memory_monitor_refresh_ms": ("memory_monitor_interval_s", 0.001),
}


def system_config_env(system_config: Mapping | None) -> tuple[dict[str, str], list[str]]:
    """For Ray's `init(_system_config=...)`: the environment that gives a node daemon started
    with it those settings (its Config is read from there), and the keys raylite does not know."""
    env: dict[str, str] = {}
    unknown: list[str] = []
    for key, value in (system_config or {}).items():
        if key not in _RAY_SYSTEM_CONFIG:
            unknown.append(key)
            continue
        field, factor = _RAY_SYSTEM_CONFIG[key]
        env[_ENV_PREFIX + field.upper()] = repr(float(value) * factor)
    return env, unknown


_CONFIG: Config | None = None


def get_config() -> Config:
    global _CONFIG
    if _CONFIG is None:
        _CONFIG = Config.from_env()
    return _CONFIG
