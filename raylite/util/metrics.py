"""Application metrics under Ray's `ray.util.metrics` names: Counter, Gauge, Histogram.

Record from a driver, a task or an actor; the values reach the cluster's `/metrics`
endpoint (Prometheus text) and the dashboard's Metrics page with their tags:

    from raylite.util.metrics import Counter
    requests = Counter("app_requests", description="Requests served.", tag_keys=("route",))
    requests.set_default_tags({"route": "/"})
    requests.inc()                       # cheap: a dict update in this process

Recording never talks to the cluster. Each process keeps its own totals and a daemon
thread writes them, when something changed, every `FLUSH_INTERVAL_S` (and once at exit)
as one JSON value in the head's key-value store (namespace "metrics", one key per
process); the head's HTTP server sums the processes when it is scraped. So an `inc()`
costs a lock and a dict update, never a round trip.
"""

from __future__ import annotations

import atexit
import bisect
import json
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

FLUSH_INTERVAL_S = 2.0
KV_NAMESPACE = "metrics"
_NAME_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_TAG_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


class Metric:
    """Base of Counter, Gauge and Histogram: name, description, tag keys and default tags."""

    _kind = "untyped"

    def __init__(self, name: str, description: str = "", tag_keys: Sequence[str] | None = None) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("Empty name is not allowed. Please provide a metric name.")
        if not _NAME_RE.match(name):
            raise ValueError(
                f"Invalid metric name {name!r}: metric names can only contain letters, numbers, '_' "
                "and ':', and cannot start with a number (for example 'app_requests')."
            )
        if not isinstance(description, str):
            raise TypeError(f"description must be a str, not {type(description).__name__}")
        if tag_keys is None:
            tag_keys = ()
        if isinstance(tag_keys, str) or not isinstance(tag_keys, tuple | list):
            raise TypeError(f"tag_keys should be a tuple of str, got {tag_keys!r}; for example tag_keys=('route',)")
        for key in tag_keys:
            if not isinstance(key, str) or not _TAG_RE.match(key):
                raise ValueError(f"Invalid tag key {key!r} of metric {name!r}: tag keys are identifiers "
                                 "(letters, numbers and '_', not starting with a number)")
        if len(set(tag_keys)) != len(tag_keys):
            raise ValueError(f"tag_keys of metric {name!r} repeat a key: {tuple(tag_keys)}")
        self._name = name
        self._description = description
        self._tag_keys: tuple[str, ...] = tuple(tag_keys)
        self._default_tags: dict[str, str] = {}
        self._default_key: tuple[str, ...] | None = () if not self._tag_keys else None  # tags=None
        # metrics of one name share their values in this process (a task that builds its
        # Counter on every call adds to the same count)
        self._values: dict[tuple[str, ...], Any] = _REGISTRY.family(self)

    @property
    def info(self) -> dict[str, Any]:
        """The metric's name, description, tag keys and default tags."""
        return {"name": self._name, "description": self._description, "tag_keys": self._tag_keys,
                "default_tags": dict(self._default_tags)}

    def set_default_tags(self, default_tags: Mapping[str, str]) -> Metric:
        """Tags used by every record call that does not give them; returns the metric itself."""
        if not isinstance(default_tags, Mapping):
            raise TypeError(f"default_tags must be a dict of str to str, got {default_tags!r}")
        self._check_tags(default_tags, "default_tags")
        self._default_tags = dict(default_tags)
        complete = all(k in self._default_tags for k in self._tag_keys)
        self._default_key = tuple(self._default_tags[k] for k in self._tag_keys) if complete else None
        return self

    def _check_tags(self, tags: Mapping[str, str], what: str) -> None:
        for key, value in tags.items():
            if key not in self._tag_keys:
                raise ValueError(f"Unrecognized tag key {key!r} in {what} of metric {self._name!r}; "
                                 f"its tag_keys are {self._tag_keys}")
            if not isinstance(value, str):
                raise TypeError(f"Tag values must be str: {what}[{key!r}] of metric {self._name!r} is "
                                f"{value!r} ({type(value).__name__}); pass str({value!r})")

    def _tag_values(self, tags: Mapping[str, str] | None) -> tuple[str, ...]:
        if not tags and self._default_key is not None:
            return self._default_key
        merged = dict(self._default_tags)
        if tags:
            if type(tags) is not dict and not isinstance(tags, Mapping):
                raise TypeError(f"tags must be a dict of str to str, got {tags!r}")
            self._check_tags(tags, "tags")
            merged.update(tags)
        missing = [k for k in self._tag_keys if k not in merged]
        if missing:
            raise ValueError(f"Missing value for tag key(s) {', '.join(missing)} of metric {self._name!r}: "
                             "pass them in tags={...} or set them with set_default_tags()")
        return tuple(merged[k] for k in self._tag_keys)

    def _header(self) -> dict[str, Any]:
        return {"name": self._name, "type": self._kind, "description": self._description,
                "tag_keys": list(self._tag_keys)}


def _number(value: Any, metric: str) -> float:
    if type(value) is float or type(value) is int:  # the common case, without ABC checks
        return float(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"metric {metric!r} records numbers, got {value!r} ({type(value).__name__})")
    return float(value)


class Counter(Metric):
    """A cumulative count that only goes up (Prometheus counter, exported as `<name>_total`)."""

    _kind = "counter"

    def __init__(self, name: str, description: str = "", tag_keys: Sequence[str] | None = None) -> None:
        super().__init__(name, description, tag_keys)

    def inc(self, value: float = 1.0, tags: Mapping[str, str] | None = None) -> None:
        """Add `value` (> 0) to the count for these tags."""
        value = _number(value, self._name)
        if value <= 0:
            raise ValueError(f"value must be >0, got {value} (Counter {self._name!r} only goes up; "
                             "use a Gauge for values that go down)")
        key = self._tag_values(tags)
        with _REGISTRY.lock:
            self._values[key] = self._values.get(key, 0.0) + value
            _REGISTRY.dirty = True
        _REGISTRY.start()

    def _snapshot(self) -> dict[str, Any]:
        return {**self._header(), "samples": [[list(k), v] for k, v in self._values.items()]}


class Gauge(Metric):
    """The last value set (Prometheus gauge); it can go up and down."""

    _kind = "gauge"

    def __init__(self, name: str, description: str = "", tag_keys: Sequence[str] | None = None) -> None:
        super().__init__(name, description, tag_keys)

    def set(self, value: float, tags: Mapping[str, str] | None = None) -> None:
        """Set the gauge for these tags to `value`."""
        value = _number(value, self._name)
        key = self._tag_values(tags)
        with _REGISTRY.lock:
            self._values[key] = value
            _REGISTRY.dirty = True
        _REGISTRY.start()

    def _snapshot(self) -> dict[str, Any]:
        return {**self._header(), "samples": [[list(k), v] for k, v in self._values.items()]}


class Histogram(Metric):
    """Counts of observations in buckets bounded by `boundaries` (Prometheus histogram)."""

    _kind = "histogram"

    def __init__(self, name: str, description: str = "", boundaries: Sequence[float] | None = None,
                 tag_keys: Sequence[str] | None = None) -> None:
        if not boundaries:
            raise ValueError(f"Histogram {name!r} needs boundaries, the upper bounds of its buckets, "
                             "for example boundaries=[0.01, 0.1, 1, 10]")
        bounds = [_number(b, name) for b in boundaries]
        if any(b <= 0 for b in bounds):
            raise ValueError(f"Invalid boundaries {list(boundaries)} of Histogram {name!r}: "
                             "boundaries must be > 0")
        if any(b >= c for b, c in zip(bounds, bounds[1:], strict=False)):
            raise ValueError(f"Invalid boundaries {list(boundaries)} of Histogram {name!r}: "
                             "boundaries must be strictly increasing")
        self._boundaries = bounds
        super().__init__(name, description, tag_keys)
        # self._values: tag values -> [bucket counts (len(boundaries) + 1, the last +Inf), sum, count]

    @property
    def info(self) -> dict[str, Any]:
        return {**super().info, "boundaries": list(self._boundaries)}

    def observe(self, value: float, tags: Mapping[str, str] | None = None) -> None:
        """Count `value` in its bucket for these tags."""
        value = _number(value, self._name)
        key = self._tag_values(tags)
        with _REGISTRY.lock:
            entry = self._values.get(key)
            if entry is None:
                entry = self._values[key] = [[0] * (len(self._boundaries) + 1), 0.0, 0]
            entry[0][bisect.bisect_left(self._boundaries, value)] += 1
            entry[1] += value
            entry[2] += 1
            _REGISTRY.dirty = True
        _REGISTRY.start()

    def _snapshot(self) -> dict[str, Any]:
        return {**self._header(), "boundaries": self._boundaries,
                "samples": [[list(k), {"buckets": list(v[0]), "sum": v[1], "count": v[2]}]
                            for k, v in self._values.items()]}


class _Registry:
    """This process's metrics and the thread that flushes them to the cluster."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.metrics: dict[str, Metric] = {}  # name -> the latest metric object of that name
        self._values: dict[str, dict[tuple[str, ...], Any]] = {}
        self.dirty = False
        self._thread: threading.Thread | None = None
        self.key = ""
        # a forked child (a worker from the zygote) has no flush thread: it starts its own,
        # under its own key, on its first record
        os.register_at_fork(after_in_child=self._forget_thread)

    def _forget_thread(self) -> None:
        self._thread = None
        self.lock = threading.Lock()

    def family(self, metric: Metric) -> dict[tuple[str, ...], Any]:
        """The values shared by every metric of this name; a clash of kind, tag keys or
        boundaries is an error now rather than a silently mixed series."""
        with self.lock:
            old = self.metrics.get(metric._name)
            if old is not None and (old._kind, old._tag_keys, getattr(old, "_boundaries", None)) != (
                    metric._kind, metric._tag_keys, getattr(metric, "_boundaries", None)):
                raise ValueError(
                    f"Metric {metric._name!r} already exists in this process as a {old._kind} with "
                    f"tag_keys={old._tag_keys}; a metric name must keep its kind, tag keys and "
                    "boundaries (choose another name)")
            self.metrics[metric._name] = metric
            return self._values.setdefault(metric._name, {})

    def start(self) -> None:
        if self._thread is not None:
            return
        with self.lock:
            if self._thread is not None:
                return
            self.key = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
            self._thread = threading.Thread(target=self._loop, name="raylite-metrics-flush", daemon=True)
            self._thread.start()
        atexit.register(self.flush)

    def _loop(self) -> None:
        while True:
            time.sleep(FLUSH_INTERVAL_S)
            self.flush()

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            self.dirty = False
            return {"pid": os.getpid(), "time": time.time(),
                    "metrics": [m._snapshot() for m in self.metrics.values() if m._values]}

    def flush(self) -> bool:
        """Write this process's values to the cluster if they changed; False when not connected."""
        if not self.dirty:
            return True
        try:
            from raylite.experimental import internal_kv as kv

            if not kv._internal_kv_initialized():
                return False
            body = json.dumps(self.snapshot()).encode()
            kv._internal_kv_put(self.key, body, namespace=KV_NAMESPACE)
            return True
        except Exception:  # noqa: BLE001 - metrics never break the program; retried next time
            self.dirty = True
            return False


_REGISTRY = _Registry()

__all__ = ["Counter", "Gauge", "Histogram", "Metric"]
