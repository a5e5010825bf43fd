"""`ray.serve.metrics`: Counter, Gauge and Histogram that tag their values with the replica's
deployment, replica id and application (and the request's route when "route" is a tag key).

Made in a replica, a metric gets the tag keys "deployment", "replica" and "application" in
front of the user's own, with their values set as default tags; these names are reserved there.
Made anywhere else, it is a plain `raylite.util.metrics` metric.

    from raylite.serve import metrics
    requests = metrics.Counter("my_requests", tag_keys=("model",))
    requests.set_default_tags({"model": "123"})
    requests.inc()      # tagged deployment=..., replica=..., application=..., model=123
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from raylite.serve import context
from raylite.util import metrics as _metrics

DEPLOYMENT_TAG = "deployment"
REPLICA_TAG = "replica"
APPLICATION_TAG = "application"
ROUTE_TAG = "route"
_RESERVED = (DEPLOYMENT_TAG, REPLICA_TAG, APPLICATION_TAG)

__all__ = ["Counter", "Gauge", "Histogram"]


def _check_tuple(tag_keys: Any) -> None:
    if tag_keys and not isinstance(tag_keys, tuple):
        raise TypeError(f"tag_keys should be a tuple, got {type(tag_keys).__name__}")


def _serve_tag_keys(tag_keys: Sequence[str] | None) -> tuple[str, ...]:
    keys = tuple(tag_keys or ())
    ctx = context._get_internal_replica_context()
    if ctx is None:
        return keys
    for key in _RESERVED:
        if key in keys:
            raise ValueError(f"the tag {key!r} is reserved for Ray Serve metrics; Serve sets it")
    serve_keys = (DEPLOYMENT_TAG, REPLICA_TAG) + ((APPLICATION_TAG,) if ctx.app_name else ())
    return serve_keys + keys


def _serve_default_tags(default_tags: Mapping[str, str]) -> dict[str, str]:
    tags = dict(default_tags)
    ctx = context._get_internal_replica_context()
    if ctx is None:
        return tags
    for key in _RESERVED:
        if key in tags:
            raise ValueError(f"the tag {key!r} is reserved for Ray Serve metrics; Serve sets it")
    tags[DEPLOYMENT_TAG] = ctx.deployment
    tags[REPLICA_TAG] = ctx.replica_tag
    if ctx.app_name:
        tags[APPLICATION_TAG] = ctx.app_name
    return tags


def _with_route(tag_keys: tuple[str, ...], tags: Mapping[str, str] | None) -> Mapping[str, str] | None:
    if ROUTE_TAG in tag_keys and not (tags and ROUTE_TAG in tags):
        return {**(tags or {}), ROUTE_TAG: context._serve_request_context.get().route}
    return tags


class Counter(_metrics.Counter):
    """A monotonically increasing metric, tagged with the replica's Serve context."""

    def __init__(self, name: str, description: str = "", tag_keys: tuple[str, ...] | None = None) -> None:
        _check_tuple(tag_keys)
        self._serve_keys = _serve_tag_keys(tag_keys)
        super().__init__(name, description, self._serve_keys)
        self.set_default_tags({})

    def set_default_tags(self, default_tags: Mapping[str, str]) -> Counter:
        super().set_default_tags(_serve_default_tags(default_tags))
        return self

    def inc(self, value: float = 1.0, tags: Mapping[str, str] | None = None) -> None:
        super().inc(value, _with_route(self._serve_keys, tags))


class Gauge(_metrics.Gauge):
    """The last recorded value, tagged with the replica's Serve context."""

    def __init__(self, name: str, description: str = "", tag_keys: tuple[str, ...] | None = None) -> None:
        _check_tuple(tag_keys)
        self._serve_keys = _serve_tag_keys(tag_keys)
        super().__init__(name, description, self._serve_keys)
        self.set_default_tags({})

    def set_default_tags(self, default_tags: Mapping[str, str]) -> Gauge:
        super().set_default_tags(_serve_default_tags(default_tags))
        return self

    def set(self, value: float, tags: Mapping[str, str] | None = None) -> None:
        super().set(value, _with_route(self._serve_keys, tags))


class Histogram(_metrics.Histogram):
    """A distribution over fixed boundaries, tagged with the replica's Serve context."""

    def __init__(self, name: str, description: str = "", boundaries: Sequence[float] | None = None,
                 tag_keys: tuple[str, ...] | None = None) -> None:
        _check_tuple(tag_keys)
        self._serve_keys = _serve_tag_keys(tag_keys)
        super().__init__(name, description, boundaries, self._serve_keys)
        self.set_default_tags({})

    def set_default_tags(self, default_tags: Mapping[str, str]) -> Histogram:
        super().set_default_tags(_serve_default_tags(default_tags))
        return self

    def observe(self, value: float, tags: Mapping[str, str] | None = None) -> None:
        super().observe(value, _with_route(self._serve_keys, tags))
