"""Replica logging per `LoggingConfig`: lines prefixed with deployment and replica, TEXT or JSON,
and one access-log line per request.

Logs go to `<tmp>/raylite-serve-logs/replica_<app>_<deployment>_<replica>.log` (buffered, so
access logging costs little on the hot path); errors are also printed to stderr, which Core
forwards to the driver with the replica's `(ServeReplica:app:deployment pid=...)` prefix.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
from typing import Any

from raylite.experimental.channel_security import owned_dir


def logs_dir(config: dict | None = None) -> str:
    """A `logs_dir` the config names, else `<tmp>/raylite-serve-logs`, which must be this
    user's own (owned_dir): in a folder another user made first, a symlink named like a
    replica's log would make the replica append to any file the cluster's user may write."""
    path = (config or {}).get("logs_dir")
    if path:
        os.makedirs(path, exist_ok=True)
        return path
    return owned_dir(os.path.join(tempfile.gettempdir(), "raylite-serve-logs"), private=False)


class ReplicaLogger:
    """A thin wrapper around a `logging.Logger` that also writes access lines."""

    def __init__(self, app: str, deployment: str, replica: str, config: dict | None) -> None:
        config = config or {}
        self.app, self.deployment, self.replica = app, deployment, replica
        self.encoding = str(config.get("encoding", "TEXT")).upper()
        level = config.get("log_level", "INFO")
        self.access_enabled = bool(config.get("enable_access_log", True))
        safe = replica.replace("/", "_").replace("#", "_")
        self.path = os.path.join(logs_dir(config), f"replica_{app}_{deployment}_{safe}.log")
        self._file = open(self.path, "a", buffering=1 << 16)  # noqa: SIM115 - lives with the replica
        self.logger = logging.getLogger(f"ray.serve.{app}.{deployment}.{safe}")
        self.logger.setLevel(level if isinstance(level, int) else getattr(logging, level, logging.INFO))
        self.logger.propagate = False
        if not self.logger.handlers:
            handler = logging.StreamHandler(self._file)
            handler.setFormatter(_Formatter(self))
            self.logger.addHandler(handler)
            err = logging.StreamHandler(sys.stderr)
            err.setLevel(logging.WARNING)
            err.setFormatter(_Formatter(self))
            self.logger.addHandler(err)
        if not self.logger.isEnabledFor(logging.INFO):
            self.access_enabled = False

    def error(self, msg: str, *args: Any) -> None:
        self.logger.error(msg, *args)

    def exception(self, msg: str, *args: Any) -> None:
        self.logger.exception(msg, *args)

    def info(self, msg: str, *args: Any) -> None:
        self.logger.info(msg, *args)

    def access(self, request_id: str, http_payload: Any, method_name: str, route: str, status: int,
               elapsed_s: float) -> None:
        if http_payload is not None:
            what = f"{http_payload[0]} {http_payload[2]}"
        else:
            what = f"CALL {method_name}"
        ms = elapsed_s * 1000.0
        if self.encoding == "JSON":
            line = json.dumps({"levelname": "INFO", "asctime": _now(), "deployment": self.deployment,
                               "replica": self.replica, "request_id": request_id, "route": route,
                               "message": f"{what} {status} {ms:.1f}ms", "status": status,
                               "latency_ms": round(ms, 3), "application": self.app})
        else:
            line = (f"INFO {_now()} {self.deployment} {self.replica} {request_id} -- "
                    f"{what} {status} {ms:.1f}ms")
        self._file.write(line + "\n")

    def flush(self) -> None:
        self._file.flush()


class _Formatter(logging.Formatter):
    def __init__(self, owner: ReplicaLogger) -> None:
        super().__init__()
        self.owner = owner

    def format(self, record: logging.LogRecord) -> str:
        o = self.owner
        msg = record.getMessage()
        if record.exc_info:
            msg += "\n" + self.formatException(record.exc_info)
        if o.encoding == "JSON":
            return json.dumps({"levelname": record.levelname, "asctime": _now(), "deployment": o.deployment,
                               "replica": o.replica, "application": o.app, "message": msg})
        return f"{record.levelname} {_now()} {o.deployment} {o.replica} -- {msg}"


def _now() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + f",{int(t % 1 * 1000):03d}"


def replica_logger(app: str, deployment: str, replica: str, config: dict | None) -> ReplicaLogger:
    return ReplicaLogger(app, deployment, replica, config)
