"""Client side of the logs API (`raylite logs`, raylite.util.state.list_logs/get_log)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from raylite.dashboard.client import ApiClient


def list_logs(address: str | None, node_id: str = "", glob: str = "") -> list[dict[str, Any]]:
    api = ApiClient(address)
    try:
        params = {k: v for k, v in (("node_id", node_id), ("glob", glob)) if v}
        return api.json("GET", "/api/v0/logs", params=params)["data"]["result"]
    finally:
        api.close()


def stream_log(address: str | None, *, node_id: str = "", filename: str = "", actor_id: str = "",
               task_id: str = "", job_id: str = "", tail: int = -1, follow: bool = False,
               suffix: str = "out") -> Iterator[bytes]:
    """Bytes of one log as the server streams them; LookupError when there is no such log."""
    api = ApiClient(address, timeout_s=None if follow else 60.0)
    params = {"node_id": node_id, "filename": filename, "actor_id": actor_id, "task_id": task_id,
              "job_id": job_id, "lines": str(tail), "follow": "1" if follow else "0", "suffix": suffix}
    params = {k: v for k, v in params.items() if v}
    try:
        with api._http.stream("GET", "/api/v0/logs/file", params=params) as r:
            if r.status_code >= 400:
                r.read()
                try:
                    message = r.json().get("msg") or r.text
                except ValueError:
                    message = r.text
                raise LookupError(message)
            yield from r.iter_bytes()
    finally:
        api.close()
