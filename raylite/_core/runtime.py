"""The process's current CoreClient, set by driver.py (init) or worker.py."""

from __future__ import annotations

from typing import Any

from raylite._core.client import refs

_state: dict[str, Any] = {"client": None, "worker": None, "driver": None}


def set_driver(client: Any, driver: Any) -> None:
    _state["client"] = client
    _state["driver"] = driver
    refs._CLIENT[0] = client


def set_worker(client: Any, worker: Any) -> None:
    _state["client"] = client
    _state["worker"] = worker
    refs._CLIENT[0] = client


def clear() -> None:
    _state["client"] = None
    _state["driver"] = None
    refs._CLIENT[0] = None


def client() -> Any:
    return _state["client"]


def worker() -> Any:
    return _state["worker"]


def driver() -> Any:
    return _state["driver"]


def is_worker() -> bool:
    return _state["worker"] is not None
