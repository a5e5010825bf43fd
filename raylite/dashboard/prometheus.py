"""Prometheus text exposition format (version 0.0.4) for the head's `/metrics` (pure).

One scrape point serves the whole cluster: the head computes every family (built-in and
`raylite.util.metrics` ones, see raylite/_core/head/cluster_metrics.py) and sends them as
{"name", "type", "help", "samples": [[series key, value], ...]}, where a series key is
already the sample name with its escaped labels. This module only writes the text.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def render(families: Iterable[Mapping[str, Any]]) -> str:
    """The families as exposition text; families of one name are merged (first type wins)."""
    merged: dict[str, dict[str, Any]] = {}
    for fam in families:
        name = fam["name"]
        if name in merged:
            merged[name]["samples"].extend(fam.get("samples", []))
        else:
            merged[name] = {"type": fam.get("type", "untyped"), "help": fam.get("help", ""),
                            "samples": list(fam.get("samples", []))}
    lines: list[str] = []
    for name, fam in merged.items():
        if not fam["samples"]:
            continue
        if fam["help"]:
            lines.append(f"# HELP {name} {_escape_help(fam['help'])}")
        lines.append(f"# TYPE {name} {fam['type']}")
        lines.extend(f"{key} {format_value(value)}" for key, value in fam["samples"])
    return "\n".join(lines) + "\n"
