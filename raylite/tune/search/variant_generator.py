"""Resolving a nested search space into concrete configs: grid axes are expanded (the first
axis varies fastest), domains are sampled, `sample_from` functions see the config resolved so
far. Searchers call `parse_spec_vars` to find a space's domains by path (a tuple of keys)."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Iterator
from typing import Any

from raylite.tune.search.sample import Categorical, Domain, Function, RandomState, _as_rng

_MAX_RESOLUTION_PASSES = 20


class RecursiveDependencyError(Exception):
    """A sample_from function read a value that is not resolved yet (tried again next pass)."""


def grid_search(values: Iterable[Any]) -> dict[str, list[Any]]:
    """Try every value in `values` (each grid axis multiplies the number of trials)."""
    return {"grid_search": list(values)}


def _try_resolve(value: Any) -> tuple[bool, Any]:
    if isinstance(value, Domain):
        return False, value
    if isinstance(value, dict) and len(value) == 1 and "grid_search" in value:
        grid = value["grid_search"]
        if not isinstance(grid, (list, tuple)):
            raise TypeError(f"grid_search needs a list of values, got {grid!r}.")
        return False, Categorical(grid).grid()
    if isinstance(value, dict) and len(value) == 1 and "eval" in value:
        expression = value["eval"]
        return False, Function(lambda spec: eval(expression, {}, {"spec": spec}))
    return True, value


def _is_resolved(value: Any) -> bool:
    return _try_resolve(value)[0]


def _split_resolved_unresolved_values(spec: dict[Any, Any]
                                      ) -> tuple[dict[tuple, Any], dict[tuple, Any]]:
    resolved: dict[tuple, Any] = {}
    unresolved: dict[tuple, Any] = {}
    for key, value in spec.items():
        done, value = _try_resolve(value)
        if not done:
            unresolved[(key,)] = value
            continue
        if isinstance(value, dict):
            children = [(key, value)]
        elif isinstance(value, (list, tuple)):
            children = [(key, {i: v}) for i, v in enumerate(value)]
        else:
            resolved[(key,)] = value
            continue
        for prefix, child in children:
            sub_resolved, sub_unresolved = _split_resolved_unresolved_values(child)
            resolved.update({(prefix, *p): v for p, v in sub_resolved.items()})
            unresolved.update({(prefix, *p): v for p, v in sub_unresolved.items()})
    return resolved, unresolved


def parse_spec_vars(spec: dict[Any, Any]) -> tuple[list[tuple[tuple, Any]],
                                                   list[tuple[tuple, Domain]],
                                                   list[tuple[tuple, Domain]]]:
    """(resolved values, sampled domains, grid domains), each a list of (path, value); the
    grid list is sorted by path so expansion order does not depend on dict order."""
    resolved, unresolved = _split_resolved_unresolved_values(spec)
    grid_vars = sorted(((p, d) for p, d in unresolved.items() if d.is_grid()),
                       key=lambda item: tuple(str(k) for k in item[0]))
    domain_vars = [(p, d) for p, d in unresolved.items() if not d.is_grid()]
    return list(resolved.items()), domain_vars, grid_vars


def _unresolved_values(spec: dict[Any, Any]) -> dict[tuple, Any]:
    return _split_resolved_unresolved_values(spec)[1]


def _has_unresolved_values(spec: dict[Any, Any]) -> bool:
    return bool(_unresolved_values(spec))


def assign_value(spec: dict[Any, Any], path: tuple, value: Any) -> None:
    """Set spec[path[0]][path[1]]... = value; a tuple on the way is rebuilt (it is immutable)."""
    parent, parent_key = None, None
    node: Any = spec
    for key in path[:-1]:
        parent, parent_key, node = node, key, node[key]
    last = path[-1]
    if isinstance(node, tuple):
        if parent is None:
            raise ValueError("Cannot assign into a top-level tuple.")
        parent[parent_key] = node[:last] + (value,) + node[last + 1:]
    else:
        node[last] = value


def _get_value(spec: Any, path: tuple) -> Any:
    for key in path:
        spec = spec[key]
    return spec


class _ConfigView(dict):
    """What a sample_from function receives: the config resolved so far, read as
    `config["x"]`, `config.x` or Ray's older `spec.config.x`; reading a value that is still
    unresolved raises RecursiveDependencyError so that resolution retries it later."""

    def __getitem__(self, key: Any) -> Any:
        return self._guard(key, dict.__getitem__(self, key))

    def get(self, key: Any, default: Any = None) -> Any:
        return self[key] if key in self else default

    def __getattr__(self, name: str) -> Any:
        if name == "config" and "config" not in self:
            return self
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def _guard(self, key: Any, value: Any) -> Any:
        if not _is_resolved(value):
            raise RecursiveDependencyError(f"`{key}` depends on a value not resolved yet: "
                                           f"{value}")
        return _ConfigView(value) if isinstance(value, dict) else value


_UnresolvedAccessGuard = _ConfigView  # Ray's name for it


def _resolve_domain_vars(spec: dict[Any, Any], domain_vars: list[tuple[tuple, Domain]],
                         allow_fail: bool = False, random_state: RandomState = None
                         ) -> tuple[bool, dict[tuple, Any]]:
    resolved: dict[tuple, Any] = {}
    error: Exception | None = None
    for _ in range(_MAX_RESOLUTION_PASSES):
        error = None
        for path, domain in domain_vars:
            if path in resolved:
                continue
            try:
                value = domain.sample(_ConfigView(spec), random_state=random_state)
            except RecursiveDependencyError as exc:
                error = exc
                continue
            except Exception as exc:
                raise ValueError(f"Could not evaluate the search-space entry "
                                 f"{'/'.join(map(str, path))} ({domain}): {exc!r}") from exc
            assign_value(spec, path, value)
            resolved[path] = value
        if error is None:
            return True, resolved
    if not allow_fail:
        assert error is not None
        raise error
    return False, resolved


def _grid_search_generator(spec: dict[Any, Any], grid_vars: list[tuple[tuple, Domain]]
                           ) -> Iterator[dict[Any, Any]]:
    if not grid_vars:
        yield spec
        return
    sizes = [len(domain) for _, domain in grid_vars]  # type: ignore[arg-type]
    if 0 in sizes:
        return
    indices = [0] * len(grid_vars)
    while True:
        variant = copy.deepcopy(spec)
        for (path, domain), i in zip(grid_vars, indices):
            assign_value(variant, path, domain[i])  # type: ignore[index]
        yield variant
        axis = 0
        while axis < len(indices):
            indices[axis] += 1
            if indices[axis] < sizes[axis]:
                break
            indices[axis] = 0
            axis += 1
        if axis == len(indices):
            return


def generate_variants(unresolved_spec: dict[Any, Any], constant_grid_search: bool = False,
                      random_state: RandomState = None
                      ) -> Iterator[tuple[dict[tuple, Any], dict[Any, Any]]]:
    """Yield (resolved variables by path, resolved spec) for each grid point of the spec.

    constant_grid_search samples the random variables once and keeps them for every grid
    point (where no random variable depends on a grid one)."""
    rng = _as_rng(random_state)
    spec = copy.deepcopy(unresolved_spec)
    _, domain_vars, grid_vars = parse_spec_vars(spec)
    if not domain_vars and not grid_vars:
        yield {}, spec
        return
    to_resolve = domain_vars
    constant: dict[tuple, Any] = {}
    all_constant = False
    if constant_grid_search:
        all_constant, constant = _resolve_domain_vars(spec, domain_vars, True, rng)
        to_resolve = [(p, d) for p, d in domain_vars if p not in constant]
    for variant in _grid_search_generator(spec, grid_vars):
        resolved_vars = dict(constant)
        if not all_constant:
            _, sampled = _resolve_domain_vars(variant, to_resolve, random_state=rng)
            resolved_vars.update(sampled)
        for inner_vars, inner_spec in generate_variants(variant, constant_grid_search, rng):
            merged = dict(resolved_vars)
            for path, _ in grid_vars:
                merged[path] = _get_value(inner_spec, path)
            merged.update(inner_vars)
            yield merged, inner_spec


def _resolve_nested_dict(nested_dict: dict[Any, Any]) -> dict[tuple, Any]:
    """{"a": {"b": 1}} -> {("a", "b"): 1}, the form format_vars takes."""
    out: dict[tuple, Any] = {}
    for key, value in nested_dict.items():
        if isinstance(value, dict):
            out.update({(key, *p): v for p, v in _resolve_nested_dict(value).items()})
        else:
            out[(key,)] = value
    return out


def _clean_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return re.sub(r"[^a-zA-Z0-9_-]+", "_", str(value)).strip("_")


def format_vars(resolved_vars: dict[tuple, Any]) -> str:
    """`{("a", "lr"): 0.1}` -> `lr=0.1000`: a trial's tag, safe in a directory name."""
    items = {k: v for k, v in resolved_vars.items()
             if k not in ("run", "env", "resources_per_trial")}
    return ",".join(f"{_clean_value(k[-1])}={_clean_value(v)}"
                    for k, v in sorted(items.items(), key=lambda kv: tuple(map(str, kv[0]))))


def _flatten_resolved_vars(resolved_vars: dict[tuple, Any]) -> dict[str, Any]:
    out = {}
    for path, value in resolved_vars.items():
        if path and path[0] == "config":
            path = path[1:]
        out["/".join(str(p) for p in path)] = value
    return out


def _count_spec_samples(spec: dict[Any, Any], num_samples: int = 1) -> int:
    _, _, grid_vars = parse_spec_vars(spec)
    count = num_samples
    for _, domain in grid_vars:
        count *= len(domain)  # type: ignore[arg-type]
    return count


def _count_variants(spec: dict[Any, Any], presets: list[dict[Any, Any]] | None = None) -> int:
    """Trials a spec (`{"config": ..., "num_samples": n}`) expands to, counting preset points."""
    presets = presets or []
    total = 0
    remaining = spec.get("num_samples", 1)
    for preset in presets:
        preset_spec = copy.deepcopy(spec)
        preset_spec["config"] = _apply_preset(preset_spec.get("config", {}), preset)
        total += _count_spec_samples(preset_spec, 1)
        remaining -= 1
    if remaining > 0:
        total += _count_spec_samples(spec, remaining)
    return total


def _apply_preset(config: dict[Any, Any], preset: dict[Any, Any]) -> dict[Any, Any]:
    """The space with the preset's values put in place of its domains (points_to_evaluate)."""
    config = copy.deepcopy(config)
    resolved, _, _ = parse_spec_vars(preset)
    for path, value in resolved:
        node = config
        for key in path[:-1]:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        node[path[-1]] = value
    return config


__all__ = ["RecursiveDependencyError", "assign_value", "format_vars", "generate_variants",
           "grid_search", "parse_spec_vars"]
