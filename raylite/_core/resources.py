"""Resource arithmetic: CPU, GPU, memory and custom names, fractional amounts.

Amounts are kept in units of 1/10000 so that adding and subtracting fractions
(0.1 + 0.2) is exact.
"""

from __future__ import annotations

from collections.abc import Mapping

_SCALE = 10000
SCALE = _SCALE  # one whole unit (1 CPU) in fixed point


def to_fixed(resources: Mapping[str, float]) -> dict[str, int]:
    return {k: int(round(v * _SCALE)) for k, v in resources.items() if v}


def from_fixed(resources: Mapping[str, int]) -> dict[str, float]:
    out = {}
    for k, v in resources.items():
        f = v / _SCALE
        out[k] = int(f) if f == int(f) else f
    return out


def fits(request: Mapping[str, int], available: Mapping[str, int]) -> bool:
    for k, v in request.items():
        if v > available.get(k, 0):
            return False
    return True


def subtract(available: dict[str, int], request: Mapping[str, int]) -> None:
    for k, v in request.items():
        available[k] = available.get(k, 0) - v


def add(available: dict[str, int], request: Mapping[str, int]) -> None:
    for k, v in request.items():
        available[k] = available.get(k, 0) + v


def describe(resources: Mapping[str, int]) -> str:
    """`{CPU: 4, GPU: 1, memory: 16.48 GiB}` for error messages: bytes as GiB, short numbers,
    and none of the names raylite keeps for itself (`node:__internal_head__`)."""
    return "{" + ", ".join(f"{k}: {amount(k, v)}" for k, v in sorted(from_fixed(resources).items())
                           if not is_internal(k)) + "}"


def is_internal(name: str) -> bool:
    """A resource a user never asks for by name: the head's marker."""
    return name.startswith("node:__internal")


def amount(name: str, value: float) -> str:
    """One amount as a person reads it: `memory: 3 GiB`, `CPU: 0.5`, `GPU: 2`."""
    if name.endswith("memory"):
        gib = value / 2**30
        if gib >= 0.1 or value == 0:
            return f"{gib:.2f}".rstrip("0").rstrip(".") + " GiB"
        return f"{value / 2**20:.1f}".rstrip("0").rstrip(".") + " MiB"
    return f"{value:g}" if isinstance(value, float) else str(value)
