"""Dict helpers searchers use to move between Tune's nested configs and flat parameter names
(`{"a": {"b": 1}}` <-> `{"a/b": 1}`), under Ray's names in `ray.tune.utils.util`."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def merge_dicts(d1: Mapping[str, Any], d2: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of d1 updated recursively with d2 (d2 wins)."""
    merged = copy.deepcopy(dict(d1))
    deep_update(merged, d2, True, [])
    return merged


def deep_update(original: dict[str, Any], new_dict: Mapping[str, Any],
                new_keys_allowed: bool = False, allow_new_subkey_list: list[str] | None = None,
                override_all_if_type_changes: list[str] | None = None,
                override_all_key_list: list[str] | None = None) -> dict[str, Any]:
    """Update `original` in place with `new_dict`, recursing into nested dicts."""
    allow_new_subkey_list = allow_new_subkey_list or []
    override_all_if_type_changes = override_all_if_type_changes or []
    override_all_key_list = override_all_key_list or []
    for key, value in new_dict.items():
        if key not in original and not new_keys_allowed:
            raise Exception(f"Unknown config parameter `{key}`")
        if isinstance(original.get(key), dict) and isinstance(value, Mapping):
            if key in override_all_key_list:
                original[key] = value
            elif (key in override_all_if_type_changes and "type" in value
                  and value["type"] != original[key].get("type")):
                original[key] = value
            else:
                deep_update(original[key], value, key in allow_new_subkey_list)
        else:
            original[key] = value
    return original


def flatten_dict(dt: dict[str, Any], delimiter: str = "/", prevent_delimiter: bool = False,
                 flatten_list: bool = False) -> dict[str, Any]:
    """`{"a": {"b": 1}}` -> `{"a/b": 1}` (lists too with flatten_list). The input is unchanged;
    prevent_delimiter refuses keys that already contain the delimiter (they would not unflatten)."""
    out: dict[str, Any] = type(dt)() if isinstance(dt, dict) else {}

    def visit(prefix: str | None, value: Any) -> None:
        if isinstance(value, dict) and (value or prefix is None):
            items: Any = value.items()
        elif flatten_list and isinstance(value, list) and value:
            items = enumerate(value)
        else:
            out[prefix] = value  # type: ignore[index]
            return
        for key, child in items:
            if prevent_delimiter and isinstance(key, str) and delimiter in key:
                raise ValueError(f"The key {key!r} contains the delimiter {delimiter!r}, so the "
                                 "flat names would be ambiguous: rename the key.")
            visit(str(key) if prefix is None else f"{prefix}{delimiter}{key}", child)

    visit(None, dt)
    return out


def unflatten_dict(dt: Mapping[str, Any], delimiter: str = "/") -> dict[str, Any]:
    """`{"a/b": 1}` -> `{"a": {"b": 1}}` (lists are not rebuilt; see unflatten_list_dict)."""
    out: dict[str, Any] = {}
    for key, value in dt.items():
        path = key.split(delimiter)
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise TypeError(f"Cannot unflatten {key!r}: its parent {part!r} holds a "
                                f"{type(node).__name__}, not a dict. Rename the keys.")
        node[path[-1]] = value
    return out


def unflatten_list_dict(dt: Mapping[str, Any], delimiter: str = "/") -> Any:
    """Like unflatten_dict, but numeric path parts become list indices (in ascending order)."""
    first = next(iter(dt), "")
    out: Any = [] if first.split(delimiter, 1)[0].isdigit() else {}
    for key, value in dt.items():
        path = key.split(delimiter)
        node = out
        for i, part in enumerate(path[:-1]):
            fresh: Any = [] if path[i + 1].isdigit() else {}
            if isinstance(node, dict):
                node = node.setdefault(part, fresh)
            else:
                if int(part) >= len(node):
                    node.append(fresh)
                node = node[int(part)]
        if isinstance(node, dict):
            node[path[-1]] = value
        else:
            node.append(value)
    return out


def unflattened_lookup(flat_key: str, lookup: Mapping[str, Any], delimiter: str = "/",
                       **kwargs: Any) -> Any:
    """Look up `a/b` in a nested dict (`lookup["a"]["b"]`); kwargs may carry a `default`."""
    node: Any = lookup
    for part in flat_key.split(delimiter):
        try:
            node = node[part] if isinstance(node, Mapping) else node[int(part)]
        except (KeyError, IndexError, ValueError):
            if "default" in kwargs:
                return kwargs["default"]
            raise
    return node


def _detect_config_single(func: Any) -> bool:
    """Whether a function trainable takes exactly one argument (the config)."""
    import inspect

    try:
        inspect.signature(func).bind({})
    except TypeError:
        return False
    return True


def validate_warmstart(parameter_names: list[str], points_to_evaluate: list[Any] | None,
                       evaluated_rewards: list[Any] | None,
                       validate_point_name_lengths: bool = True) -> None:
    """Check that warm-start points (lists or dicts) and their rewards fit the parameters."""
    if points_to_evaluate is None:
        if evaluated_rewards:
            raise ValueError("evaluated_rewards were given without points_to_evaluate.")
        return
    if not isinstance(points_to_evaluate, list):
        raise TypeError(f"points_to_evaluate must be a list, got {type(points_to_evaluate)}.")
    for point in points_to_evaluate:
        if not isinstance(point, (dict, list)):
            raise TypeError(f"Each point to evaluate must be a dict or a list, got {point!r}.")
        if validate_point_name_lengths and not isinstance(point, dict) and \
                len(point) != len(parameter_names):
            raise ValueError(f"Point {point} has {len(point)} values but the search space has "
                             f"{len(parameter_names)} parameters ({parameter_names}).")
    if evaluated_rewards is not None:
        if not isinstance(evaluated_rewards, list):
            raise TypeError(f"evaluated_rewards must be a list, got {type(evaluated_rewards)}.")
        if len(evaluated_rewards) != len(points_to_evaluate):
            raise ValueError(f"{len(points_to_evaluate)} points_to_evaluate but "
                             f"{len(evaluated_rewards)} evaluated_rewards: give one per point.")
