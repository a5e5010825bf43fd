"""The process's current client, set by cluster/driver.py (init) or worker/worker.py.

The client is typed by CoreAPI (core_api.py): the public layer may call only what that
Protocol names, whichever of CoreClient or the Ray Client's RemoteClient it is.
"""

from __future__ import annotations

from typing import Any

from raylite._core.core_api import CoreAPI

_state: dict[str, Any] = {"client": None, "worker": None, "driver": None}
# The same client, in a one-slot list that client/refs.py reads on every ref it makes (a list
# item is the cheapest read the hot path can do; the dict above is for everything else).
CURRENT: list[Any] = [None]


def set_driver(client: CoreAPI, driver: Any) -> None:
    _state["client"] = client
    _state["driver"] = driver
    CURRENT[0] = client


def set_worker(client: CoreAPI, worker: Any) -> None:
    _state["client"] = client
    _state["worker"] = worker
    CURRENT[0] = client


def clear() -> None:
    _state["client"] = None
    _state["driver"] = None
    CURRENT[0] = None


def client() -> CoreAPI | None:
    current: CoreAPI | None = _state["client"]
    return current


def worker() -> Any:
    return _state["worker"]


def driver() -> Any:
    return _state["driver"]


def is_worker() -> bool:
    return _state["worker"] is not None
