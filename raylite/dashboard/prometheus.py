"""Prometheus text exposition format (version 0.0.4) for the head's `/metrics` (pure).

One scrape point serves the whole cluster: built-in families come from the head's view
(node load reports, actor and task tables, Serve's and Train's KV snapshots) and user
families from `raylite.util.metrics` values that every process flushes to the KV store,
summed here across processes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass
class Family:
    """One metric family: `samples` are (name suffix, labels, value)."""

    name: str
    type: str  # counter | gauge | histogram | untyped
    help: str = ""
    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)

    def add(self, value: float, suffix: str = "", **labels: Any) -> Family:
        self.samples.append((suffix, {k: str(v) for k, v in labels.items()}, float(value)))
        return self


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def render(families: Iterable[Family]) -> str:
    """The families as exposition text; families of one name are merged, first wins the type."""
    merged: dict[str, Family] = {}
    for fam in families:
        if fam.name in merged:
            merged[fam.name].samples.extend(fam.samples)
        else:
            merged[fam.name] = Family(fam.name, fam.type, fam.help, list(fam.samples))
    lines: list[str] = []
    for fam in merged.values():
        if fam.help:
            lines.append(f"# HELP {fam.name} {_escape_help(fam.help)}")
        lines.append(f"# TYPE {fam.name} {fam.type}")
        for suffix, labels, value in fam.samples:
            label_text = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels.items())
            lines.append(f"{fam.name}{suffix}{{{label_text}}} {_number(value)}" if label_text
                         else f"{fam.name}{suffix} {_number(value)}")
    return "\n".join(lines) + "\n"


def user_families(processes: Iterable[Mapping[str, Any]]) -> list[Family]:
    """Families from `raylite.util.metrics` snapshots of many processes, summed per tag set.

    Counters and histograms add up across processes; a gauge keeps the newest process's
    value for each tag set (two processes setting one gauge is a last-writer-wins race).
    """
    fams: dict[str, Family] = {}
    values: dict[str, dict[tuple[str, ...], Any]] = {}
    newest: dict[tuple[str, tuple[str, ...]], float] = {}
    for proc in sorted(processes, key=lambda p: p.get("time", 0)):
        for m in proc.get("metrics", []):
            name, kind = m.get("name"), m.get("type")
            if not name or kind not in ("counter", "gauge", "histogram"):
                continue
            if name not in fams:
                family_name = name[:-6] if kind == "counter" and name.endswith("_total") else name
                fams[name] = Family(family_name, kind, m.get("description", ""))
                values[name] = {}
            elif fams[name].type != kind:
                continue  # two programs used one name for different kinds: keep the first
            keys = list(m.get("tag_keys", []))
            for tag_values, value in m.get("samples", []):
                key = tuple(zip(keys, tag_values, strict=False))
                table = values[name]
                if kind == "counter":
                    table[key] = table.get(key, 0.0) + float(value)
                elif kind == "gauge":
                    table[key] = float(value)
                    newest[(name, key)] = proc.get("time", 0)
                else:
                    acc = table.setdefault(key, {"bounds": list(m.get("boundaries", [])),
                                                 "buckets": [0] * len(value["buckets"]), "sum": 0.0, "count": 0})
                    if len(acc["buckets"]) == len(value["buckets"]):
                        acc["buckets"] = [a + b for a, b in zip(acc["buckets"], value["buckets"], strict=True)]
                        acc["sum"] += value["sum"]
                        acc["count"] += value["count"]
    for name, fam in fams.items():
        for key, value in values[name].items():
            labels = dict(key)
            if fam.type == "counter":
                fam.add(value, "_total", **labels)
            elif fam.type == "gauge":
                fam.add(value, **labels)
            else:
                running = 0
                for bound, count in zip([*value["bounds"], math.inf], value["buckets"], strict=False):
                    running += count
                    fam.add(running, "_bucket", **labels, le=_number(float(bound)))
                fam.add(value["sum"], "_sum", **labels)
                fam.add(value["count"], "_count", **labels)
    return list(fams.values())
