"""One frozen Config, read once; the only reader of RAYLITE_* environment variables.

It also reads Ray's authentication variables, the way KubeRay sets them in every pod:
RAY_AUTH_MODE (token | disabled), RAY_AUTH_TOKEN and RAY_AUTH_TOKEN_PATH (see `auth_from_env`).
"""

from __future__ import annotations

import contextlib
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
    object_spilling: bool = True  # False: a full store refuses new objects instead of spilling old ones
    recycled_segment_idle_s: float = 10.0  # freed segments kept warm for reuse this long
    # a store fuller than this (share of its capacity) has every process of the cluster collect
    # reference cycles (Ray's plasma_store_usage_trigger_gc_threshold; see P.CollectGarbage), at
    # most once per global_gc_min_interval_s; each process collects at most once per
    # local_gc_min_interval_s
    store_usage_gc_threshold: float = 0.7
    global_gc_min_interval_s: float = 30.0
    local_gc_min_interval_s: float = 10.0
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
    max_tasks_in_flight_per_worker: int = 16
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
    # keys of this cluster in a shared Redis (KubeRay: RAY_external_storage_namespace, the
    # RayCluster's UID), so clusters sharing one Redis never read each other's tables
    persist_namespace: str = ""
    # address of a running cluster (RAYLITE_ADDRESS) and its token
    address: str = ""
    token: str = ""
    # Ray's RAY_AUTH_MODE: "token" (raylite always authenticates) or "disabled", which takes
    # effect only with allow_no_auth (RAYLITE_ALLOW_NO_AUTH=1); a head or node asked to run
    # without auth and not allowed to refuses to start (see docs/security.md)
    auth_mode: str = "token"
    allow_no_auth: bool = False
    # where the token came from: "RAYLITE_TOKEN", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH",
    # "~/.ray/auth_token", "RAY_AUTH_MODE=disabled" or ""
    token_source: str = ""
    log_level: str = "WARNING"
    # the head's HTTP API server (jobs, state, logs, dashboard); started on its first request
    include_dashboard: bool = True
    dashboard_host: str = "127.0.0.1"
    dashboard_port: int = 8265
    # loopback clients may skip the token (off: every request carries it, as off loopback)
    dashboard_loopback_without_token: bool = False
    # host names (comma-separated) a browser may use for the API server beyond loopback names, this
    # machine's names and IP literals (DNS rebinding guard, dashboard/browser_guard.py); "*": any
    dashboard_allowed_hosts: str = ""
    # session directories (and their logs) kept after their cluster stopped; older ones go
    sessions_to_keep: int = 10
    # raise Python's third GC threshold while the client's tables are large (client/gc_pacing.py)
    gc_pacing: bool = True
    # task events: per-job cap (oldest dropped first, counted) and how often processes flush
    task_events_enabled: bool = True
    task_events_max_per_job: int = 10000
    task_events_flush_interval_s: float = 1.0
    # after a job's driver exits, its tasks still open this long later are closed as FAILED
    task_events_job_end_grace_s: float = 5.0
    # a stopped job's entrypoint gets SIGTERM, then SIGKILL after this
    job_stop_grace_s: float = 3.0
    # Ray Client sessions served at once (each is a proxy driver process, ~28 MiB), and how long
    # an authenticated connection may take to send its `init` before its proxy gives up
    ray_client_max_sessions: int = 64
    # the interface the Ray Client server binds ("": where the head's port listens, i.e. the
    # --node-ip-address given, else every interface); e.g. 0.0.0.0 to expose only this port of a
    # head whose other ports stay on 127.0.0.1
    ray_client_server_host: str = ""
    ray_client_init_timeout_s: float = 30.0
    # Ray Client server (ray://HOST:PORT) on a `raylite start --head` head: -1 = Ray's 10001,
    # skipped with a warning when taken; 0 = off; else that port (a taken one fails the start)
    ray_client_server_port: int = -1
    # Ray's RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO: a task or actor that asks for no GPU sees
    # CUDA_VISIBLE_DEVICES="" (no device) instead of the worker's own value
    accel_env_var_override_on_zero: bool = False

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
        if "accel_env_var_override_on_zero" not in values and env.get("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO"):
            values["accel_env_var_override_on_zero"] = env["RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO"].lower() in (
                "1", "true", "yes", "on")
        values.update(auth_from_env(env, values.get("token", ""), values.get("allow_no_auth", False)))
        return cls(**values)

    @property
    def auth_disabled(self) -> bool:
        """True when RAY_AUTH_MODE=disabled was accepted (RAYLITE_ALLOW_NO_AUTH=1)."""
        return self.auth_mode == "disabled" and self.allow_no_auth

    def replace(self, **changes) -> Config:
        return dataclasses.replace(self, **changes)


# The token a cluster uses when RAY_AUTH_MODE=disabled is accepted: public, so every component
# (which all still run the token handshake) agrees on it without a secret. Never a real secret.
NO_AUTH_TOKEN = "raylite-auth-disabled"
_AUTH_MODES = ("token", "disabled")


class AuthConfigError(ValueError):
    """RAY_AUTH_MODE / RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH cannot be used as given."""


def auth_from_env(env: Mapping[str, str], token: str, allow_no_auth: bool) -> dict[str, str]:
    """The token and auth mode from Ray's variables, as Ray reads them.

    RAYLITE_TOKEN wins. Otherwise, with RAY_AUTH_MODE=token (what KubeRay sets with
    `authOptions.mode: token`), RAY_AUTH_TOKEN, else the file RAY_AUTH_TOKEN_PATH names, is the
    cluster token: so a pod that cannot read the head's token file still joins. As in Ray,
    RAY_AUTH_TOKEN is ignored without RAY_AUTH_MODE=token (a shell holding another cluster's
    token must not change which token raylite presents). RAY_AUTH_MODE=disabled with
    RAYLITE_ALLOW_NO_AUTH=1 gives every component the public NO_AUTH_TOKEN.
    """
    mode = (env.get("RAY_AUTH_MODE") or "token").strip().lower()
    if mode not in _AUTH_MODES:
        raise AuthConfigError(f"RAY_AUTH_MODE={env.get('RAY_AUTH_MODE')!r} is not one of {list(_AUTH_MODES)}; "
                              "unset it (raylite always uses a token) or set RAY_AUTH_MODE=token")
    out = {"auth_mode": mode, "token_source": "RAYLITE_TOKEN" if token else ""}
    if token:
        return out
    if mode == "token" and "RAY_AUTH_MODE" in env:
        if env.get("RAY_AUTH_TOKEN", "").strip():
            out.update(token=env["RAY_AUTH_TOKEN"].strip(), token_source="RAY_AUTH_TOKEN")
        elif env.get("RAY_AUTH_TOKEN_PATH"):
            path = env["RAY_AUTH_TOKEN_PATH"]
            try:
                with open(os.path.expanduser(path)) as f:
                    value = f.read().strip()
            except OSError as e:
                raise AuthConfigError(f"RAY_AUTH_TOKEN_PATH={path!r} cannot be read ({e.strerror}); "
                                      "point it at a file holding the cluster token, or set "
                                      "RAY_AUTH_TOKEN instead") from None
            if not value:
                raise AuthConfigError(f"RAY_AUTH_TOKEN_PATH={path!r} is empty; it must hold the cluster token")
            out.update(token=value, token_source="RAY_AUTH_TOKEN_PATH")
        else:  # Ray's third place: the file `ray get-auth-token --generate` writes
            with contextlib.suppress(OSError):
                with open(os.path.join(env.get("HOME") or os.path.expanduser("~"), ".ray", "auth_token")) as f:
                    value = f.read().strip()
                if value:
                    out.update(token=value, token_source="~/.ray/auth_token")
    elif mode == "disabled" and allow_no_auth:
        out.update(token=NO_AUTH_TOKEN, token_source="RAY_AUTH_MODE=disabled")
    return out


def no_auth_refusal(config: Config) -> str:
    """Why a head or node must not start ("" when it may): RAY_AUTH_MODE=disabled asked for a
    cluster anyone who reaches its ports could run code on, without raylite's explicit opt-in."""
    if config.auth_mode == "disabled" and not config.allow_no_auth:
        return ("RAY_AUTH_MODE=disabled asks for a cluster without authentication: anyone who can reach "
                "its ports could run code on it. raylite refuses by default. Either use a token "
                "(RAY_AUTH_MODE=token with RAY_AUTH_TOKEN, e.g. KubeRay's `authOptions: {mode: token}`), "
                "or, on a network you trust, set RAYLITE_ALLOW_NO_AUTH=1 on every node, driver and CLI.")
    return ""


# Ray's `init(_system_config={...})` keys that raylite honours: the Config field each sets, and
# the factor from Ray's unit to the field's (Ray counts the monitor's period in milliseconds;
# None: the value is a switch; "names": a list of module names).
_RAY_SYSTEM_CONFIG: dict[str, tuple[str, float | str | None]] = {
    "memory_usage_threshold": ("memory_usage_threshold", 1.0),
    "memory_monitor_refresh_ms": ("memory_monitor_interval_s", 0.001),
    "automatic_object_spilling_enabled": ("object_spilling", None),
    "plasma_store_usage_trigger_gc_threshold": ("store_usage_gc_threshold", 1.0),
    "global_gc_min_interval_s": ("global_gc_min_interval_s", 1.0),
    "local_gc_min_interval_s": ("local_gc_min_interval_s", 1.0),
    "preload_python_modules": ("preload_modules", "names"),  # imported by the workers' template
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
        if factor is None:
            if not isinstance(value, bool):
                raise ValueError(f"_system_config[{key!r}] must be True or False, not {value!r}")
            env[_ENV_PREFIX + field.upper()] = "1" if value else "0"
        elif factor == "names":
            if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"_system_config[{key!r}] must be a list of module names, not {value!r}")
            env[_ENV_PREFIX + field.upper()] = ",".join(value)
        else:
            env[_ENV_PREFIX + field.upper()] = repr(float(value) * float(factor))
    return env, unknown


_CONFIG: Config | None = None


def get_config() -> Config:
    global _CONFIG
    if _CONFIG is None:
        _CONFIG = Config.from_env()
    return _CONFIG


def reload_config() -> Config:
    """Read the environment again, for a process that changed it on purpose: the CLI, after
    turning Ray's flags and KubeRay's variables into RAYLITE_* settings, so it and the daemon it
    starts see the same Config. Everything else reads the Config once."""
    global _CONFIG
    _CONFIG = Config.from_env()
    return _CONFIG


# ---------------------------------------------------------------- where this process stands
# A few variables say where a process is rather than how raylite is tuned: which cluster to
# join, which submitted job it runs, the token its starter handed it. A job supervisor, the CLI
# or a test sets them after the Config was first read, so they are read afresh on each call;
# they are still read here only.

def env_address(names: tuple[str, ...] = ("RAYLITE_ADDRESS", "RAY_ADDRESS")) -> str:
    """The cluster to join from the environment: the first of `names` that is set ("" if none).
    By default RAYLITE_ADDRESS, else Ray's RAY_ADDRESS."""
    for name in names:
        if not name.endswith("ADDRESS") or not name.startswith(("RAYLITE_", "RAY_")):
            raise ValueError(f"env_address reads cluster addresses, not {name!r}")
        value = os.environ.get(name)
        if value:
            return value
    return ""


def env_api_server_address() -> str:
    """The first of RAY_API_SERVER_ADDRESS, RAYLITE_ADDRESS, RAY_ADDRESS that is an http(s) URL."""
    for var in ("RAY_API_SERVER_ADDRESS", _ENV_PREFIX + "ADDRESS", "RAY_ADDRESS"):
        value = os.environ.get(var, "")
        if value.startswith(("http://", "https://")):
            return value
    return ""


def env_token() -> str:
    """RAYLITE_TOKEN as this process's starter set it ("" if unset): a daemon's or child's token."""
    return os.environ.get(_ENV_PREFIX + "TOKEN", "")


def env_storage_path() -> str:
    """Ray's RAY_STORAGE: where Tune and Train keep results when RunConfig names no storage_path
    ("" if unset)."""
    return os.environ.get("RAY_STORAGE", "")


def env_ignore_unhandled_errors() -> bool:
    """Ray's RAY_IGNORE_UNHANDLED_ERRORS=1 (or RAYLITE_IGNORE_UNHANDLED_ERRORS=1): a driver does
    not report task errors nobody read. Read on each report, so a program may set it any time."""
    return "1" in (os.environ.get("RAY_IGNORE_UNHANDLED_ERRORS"), os.environ.get(_ENV_PREFIX + "IGNORE_UNHANDLED_ERRORS"))


def job_submission_id() -> str:
    """The submitted job this driver runs (RAYLITE_JOB_SUBMISSION_ID, set by its supervisor), or ""."""
    return os.environ.get(_ENV_PREFIX + "JOB_SUBMISSION_ID", "")


def job_runtime_env() -> dict | None:
    """The runtime_env the job supervisor passed to its driver (RAYLITE_JOB_RUNTIME_ENV), or None."""
    import json

    raw = os.environ.get(_ENV_PREFIX + "JOB_RUNTIME_ENV")
    return json.loads(raw) if raw else None
