"""What the library searchers (Optuna, HyperOpt) share: walking a Tune search space.

A Tune `param_space` is a nested dict whose leaves are constants, `Domain`s (`tune.uniform`, ...)
or `{"grid_search": [...]}`. A library searcher needs the Domains by path, to translate each into
its library's own distribution, and hands back a nested config of concrete values; Tune merges
that config over the constants. Grid search has no meaning to a model-based searcher, so it is
refused with the fix (use `tune.choice`), as Ray does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Path = tuple[str, ...]


def _domain_class() -> type:
    from raylite.tune.search.sample import Domain

    return Domain


def is_grid(value: Any) -> bool:
    return isinstance(value, Mapping) and len(value) == 1 and "grid_search" in value


def walk_space(spec: Mapping[str, Any], prefix: Path = ()) -> tuple[dict[Path, Any], dict[Path, Any], list[Path]]:
    """Split `spec` into (constants, domains, grid paths), each keyed by its path of keys."""
    domain_cls = _domain_class()
    constants: dict[Path, Any] = {}
    domains: dict[Path, Any] = {}
    grids: list[Path] = []
    for key, value in spec.items():
        path = (*prefix, str(key))
        if is_grid(value):
            grids.append(path)
        elif isinstance(value, domain_cls):
            domains[path] = value
        elif isinstance(value, Mapping) and value:
            sub = walk_space(value, path)
            constants.update(sub[0])
            domains.update(sub[1])
            grids.extend(sub[2])
        else:
            constants[path] = value
    return constants, domains, grids


def has_unresolved(spec: Any) -> bool:
    """True when `spec` holds a Tune Domain or grid_search somewhere (so it needs converting)."""
    if not isinstance(spec, Mapping):
        return False
    _, domains, grids = walk_space(spec)
    return bool(domains or grids)


def refuse_grids(grids: list[Path], searcher: str) -> None:
    if grids:
        names = ", ".join("/".join(p) for p in grids)
        raise ValueError(
            f"{searcher} cannot search a tune.grid_search (found at {names}): a model-based "
            "searcher proposes points itself. Use tune.choice([...]) for those values instead, "
            "or drop search_alg to run the grid with Tune's default BasicVariantGenerator.")


def flatten(config: Mapping[str, Any], sep: str = "/", prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a/b': 1}; non-dict leaves stay as they are."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{sep}{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value and not is_grid(value):
            flat.update(flatten(value, sep, name))
        else:
            flat[name] = value
    return flat


def unflatten(flat: Mapping[str, Any], sep: str = "/") -> dict[str, Any]:
    """{'a/b': 1} -> {'a': {'b': 1}}: the nested config Tune merges over its constants."""
    nested: dict[str, Any] = {}
    for name, value in flat.items():
        node = nested
        *parents, leaf = name.split(sep)
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


def describe(domain: Any) -> str:
    sampler = domain.get_sampler() if hasattr(domain, "get_sampler") else None
    return f"{type(domain).__name__} with a {type(sampler).__name__} sampler"


def check_metric_mode(searcher: str, metric: Any, mode: Any) -> None:
    """The error a Tune user sees when neither the searcher nor TuneConfig named metric and mode."""
    if not metric or not mode:  # RuntimeError, as Ray's searchers raise it from suggest()
        raise RuntimeError(
            f"{searcher} needs a metric and a mode to optimize, got metric={metric!r}, "
            f"mode={mode!r}. Pass them to {searcher}(metric=..., mode='min'|'max') or to "
            "tune.TuneConfig(metric=..., mode=...).")


def check_mode_value(searcher: str, mode: Any) -> None:
    modes = mode if isinstance(mode, (list, tuple)) else [mode]
    bad = [m for m in modes if m not in (None, "min", "max")]
    if bad:
        raise ValueError(f"{searcher}: mode must be 'min' or 'max' (or a list of them), got {mode!r}.")
