"""Node labels as a scheduling constraint: Ray's label selectors, checked and matched.

Ray 2.60 lets a task or actor ask for nodes by label in two spellings:
- `label_selector={"region": "us-west", "gpu": "!A100", "zone": "in(a,b)", "spot": "!in(yes)"}`
  (a value is equality, `!` negates, `in(...)` lists values), with `fallback_strategy=[
  {"label_selector": {...}}, ...]`: selectors tried in order when the first matches no node;
- `NodeLabelSchedulingStrategy(hard={"region": In("us")}, soft={"disk": Exists()})`: nodes must
  match `hard`, those that also match `soft` are preferred.

Both become one wire form, so the head and the nodes match them without raylite's public
classes: `["LABELS", [selector, fallback, ...], soft]`, where a selector is a list of
`[key, op, values]` and `op` is one of "in", "!in", "exists", "!exists". A node matches a
selector when it matches each of its expressions; "!in" also matches a node without the key
(as in Ray). Pure functions: validation with Ray's messages, parsing, matching.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

LABELS = "LABELS"
# the label every node carries, its id in hex (Ray's ray._raylet.RAY_NODE_ID_KEY): a selector on
# it pins work to one node
NODE_ID_LABEL = "ray.io/node-id"

_NAME = r"[a-zA-Z0-9]([a-zA-Z0-9_.-]{0,61}[a-zA-Z0-9])?"
_NAME_RE = re.compile(_NAME)
_PREFIX_RE = re.compile(rf"^({_NAME}?(\.{_NAME}?)*)$")
_SELECTOR_VALUE_RE = re.compile(rf"^!?(?:in)?\({_NAME}(?:, ?{_NAME})*\)$|^!?{_NAME}$")
_NAME_RULE = ("must be 63 chars or less beginning and ending with an alphanumeric character "
              "([a-z0-9A-Z]) with dashes (-), underscores (_), dots (.), and alphanumerics between.")


def label_key_error(key: Any) -> str | None:
    """Why `key` is not a valid label key (Kubernetes syntax: optional DNS prefix, '/', name), or None."""
    if not isinstance(key, str):
        return f"Label keys must be strings, got {key!r} of type {type(key).__name__}."
    name = key
    if "/" in key:
        prefix, name = key.rsplit("/", 1)
        if len(prefix) > 253 or not _PREFIX_RE.fullmatch(prefix):
            return (f"Invalid label key prefix `{prefix}`. Prefix must be a series of DNS labels separated "
                    "by dots (.), not longer than 253 characters in total.")
    if len(name) > 63 or not _NAME_RE.fullmatch(name):
        return f"Invalid label key name `{name}`. Name {_NAME_RULE}"
    return None


def selector_value_error(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"Label selector values must be strings, got {value!r} of type {type(value).__name__}."
    if value == "" or _SELECTOR_VALUE_RE.fullmatch(value):
        return None
    return (f"Invalid label selector value `{value}`. The label selector value should contain optional "
            f"operators and a label value. Supported operators are: ! and in(). Value {_NAME_RULE}")


def label_selector_error(selector: Any) -> str | None:
    """Why a `label_selector` option is invalid (Ray's checks and messages), or None."""
    if selector is None:
        return None
    if not isinstance(selector, dict):
        return f"label_selector must be a dict of label key -> value, got {type(selector).__name__}."
    for key, value in selector.items():
        error = label_key_error(key) or (selector_value_error(value) if value is not None else None)
        if error:
            return error
    return None


def fallback_strategy_error(fallback: Any) -> str | None:
    """Why a `fallback_strategy` option is invalid (Ray's checks and messages), or None."""
    if fallback is None:
        return None
    if not isinstance(fallback, list):
        return f"fallback_strategy must be a list of dicts like {{'label_selector': {{...}}}}, got {type(fallback).__name__}."
    for strategy in fallback:
        if not isinstance(strategy, dict):
            return "Each element in fallback_strategy must be a dictionary."
        if not strategy:
            return "Empty dictionary found in `fallback_strategy`."
        for option in strategy:
            if option != "label_selector":
                return f"Unsupported option found: '{option}'. Only ['label_selector'] is currently supported."
        selector = strategy.get("label_selector")
        if selector:
            if not isinstance(selector, dict):
                return 'The value of "label_selector" must be a dictionary.'
            error = label_selector_error(selector)
            if error:
                return error
    return None


def parse_selector(selector: Mapping[str, str] | None) -> list[list]:
    """{"zone": "in(a, b)", "gpu": "!A100"} -> [["zone", "in", ["a", "b"]], ["gpu", "!in", ["A100"]]]."""
    exprs: list[list] = []
    for key, value in (selector or {}).items():
        text = value or ""
        negated = text.startswith("!")
        if negated:
            text = text[1:]
        if text.startswith("in(") and text.endswith(")"):
            values = [v.strip() for v in text[3:-1].split(",")]
        elif text.startswith("(") and text.endswith(")"):
            values = [v.strip() for v in text[1:-1].split(",")]
        else:
            values = [text]
        exprs.append([key, "!in" if negated else "in", values])
    return exprs


def matches(selector: Sequence[Sequence], labels: Mapping[str, str]) -> bool:
    """Whether a node with `labels` matches every expression of `selector` (wire form)."""
    for key, op, values in selector:
        present = key in labels
        if op == "in":
            ok = present and labels[key] in values
        elif op == "!in":
            ok = not (present and labels[key] in values)
        elif op == "exists":
            ok = present
        elif op == "!exists":
            ok = not present
        else:
            ok = False
        if not ok:
            return False
    return True


def wire_strategy(selectors: Sequence[list], soft: list | None = None) -> list:
    return [LABELS, [list(s) for s in selectors], list(soft or [])]


def describe(selector: Sequence[Sequence]) -> str:
    parts = []
    for key, op, values in selector:
        if op in ("exists", "!exists"):
            parts.append(f"{key} {op}")
        else:
            parts.append(f"{key} {op} ({', '.join(values)})")
    return "{" + ", ".join(parts) + "}"


def first_matching(strategy: Sequence, labels: Mapping[str, str]) -> bool:
    """Whether a node with `labels` matches any selector of a LABELS wire strategy."""
    return any(matches(sel, labels) for sel in strategy[1])
