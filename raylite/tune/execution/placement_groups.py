"""`PlacementGroupFactory`: a trial's resources as bundles. The trial's own actor runs in the
first bundle; the others are reserved for what the trial starts (tasks, training workers)."""

from __future__ import annotations

from typing import Any

_RAY_KEYS = {"cpu": "CPU", "gpu": "GPU", "memory": "memory"}


def _normalize(resources: dict[str, Any]) -> dict[str, float]:
    """{"cpu": 2, "gpu": 1} -> {"CPU": 2.0, "GPU": 1.0}; negative amounts are refused."""
    out: dict[str, float] = {}
    for key, amount in resources.items():
        if key in ("extra_cpu", "extra_gpu"):
            continue
        name = _RAY_KEYS.get(key, key)
        if not isinstance(amount, (int, float)) or isinstance(amount, bool) or amount < 0:
            raise ValueError(f"Trial resource {key}={amount!r}: amounts must be numbers >= 0.")
        if amount:
            out[name] = out.get(name, 0.0) + float(amount)
    return out


class PlacementGroupFactory:
    """Resources for one trial: `PlacementGroupFactory([{"CPU": 1}, {"CPU": 2}], "PACK")`."""

    def __init__(self, bundles: list[dict[str, float]], strategy: str = "PACK",
                 *args: Any, **kwargs: Any) -> None:
        if not bundles or not isinstance(bundles, list):
            raise ValueError("PlacementGroupFactory needs a non-empty list of resource bundles, "
                             "e.g. [{'CPU': 1}].")
        if strategy not in ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"):
            raise ValueError(f"Unknown placement strategy {strategy!r}: use PACK, SPREAD, "
                             "STRICT_PACK or STRICT_SPREAD.")
        self._bundles = [_normalize(dict(b)) for b in bundles]
        self._strategy = strategy
        self._args, self._kwargs = args, kwargs

    @property
    def bundles(self) -> list[dict[str, float]]:
        return [dict(b) for b in self._bundles]

    @property
    def strategy(self) -> str:
        return self._strategy

    @property
    def head_bundle_is_empty(self) -> bool:
        return not self._bundles[0]

    @property
    def required_resources(self) -> dict[str, float]:
        """Everything the trial holds while it runs (the sum of its bundles)."""
        total: dict[str, float] = {}
        for bundle in self._bundles:
            for key, amount in bundle.items():
                total[key] = total.get(key, 0.0) + amount
        return total

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, PlacementGroupFactory) and self._bundles == other._bundles
                and self._strategy == other._strategy)

    def __hash__(self) -> int:
        return hash((str(self._bundles), self._strategy))

    def __repr__(self) -> str:
        return f"PlacementGroupFactory({self._bundles}, strategy={self._strategy!r})"


def resource_dict_to_pg_factory(spec: Any) -> PlacementGroupFactory:
    """A trial's resources in any of Ray's spellings: a dict ({"cpu": 1, "gpu": 0.5}), a
    PlacementGroupFactory, or a ScalingConfig (its trainer and worker bundles)."""
    if isinstance(spec, PlacementGroupFactory):
        return spec
    if spec is None:
        return PlacementGroupFactory([{"CPU": 1}])
    if hasattr(spec, "as_placement_group_factory"):  # a Train ScalingConfig
        bundles = spec.as_placement_group_factory()
        bundles = bundles.bundles if isinstance(bundles, PlacementGroupFactory) else bundles
        return PlacementGroupFactory(list(bundles), getattr(spec, "placement_strategy", "PACK"))
    if isinstance(spec, dict):
        head = _normalize(spec)
        extra_cpu, extra_gpu = spec.get("extra_cpu", 0), spec.get("extra_gpu", 0)
        bundles = [head]
        if extra_cpu or extra_gpu:
            bundles.append(_normalize({"CPU": extra_cpu, "GPU": extra_gpu}))
        return PlacementGroupFactory(bundles)
    raise TypeError(f"Trial resources must be a dict, a PlacementGroupFactory or a "
                    f"ScalingConfig, got {type(spec).__name__}.")
