"""ActorPool: spread work over a fixed set of actors (placeholder until util lands)."""

from __future__ import annotations

from typing import Any


class ActorPool:
    def __init__(self, actors: list[Any]) -> None:
        raise NotImplementedError("ActorPool is being implemented")
