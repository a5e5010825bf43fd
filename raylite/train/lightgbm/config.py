"""LightGBMConfig, ``get_network_params`` and the backend that fills them in on each rank.

LightGBM's distributed mode is a socket mesh: every machine listens on its own port
and is given the full ``machines`` list (``ip:port,ip:port``). Each training worker
reported a port it found free when the group was placed; the backend hands each rank
its own port plus the whole list, in rank order, before the loop starts.
``get_network_params()`` returns them for ``lightgbm.train(params | ...)``.
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from raylite.train._internal.gbdt import limit_threads
from raylite.train.config import BackendConfig

if TYPE_CHECKING:
    from raylite.train._internal.session import WorkerSpec

# One training worker per process, so the process holds its rank's network parameters.
_network_params: dict[str, Any] | None = None
_lock = threading.Lock()


def get_network_params() -> dict[str, Any]:
    """``num_machines``, ``local_listen_port`` and ``machines`` for LightGBM's network."""
    with _lock:
        if not _network_params:
            warnings.warn(
                "ray.train.lightgbm.get_network_params() was called outside the training loop "
                "of a LightGBMTrainer, so it knows no worker group and returns {}. Call it "
                "inside train_loop_per_worker.",
                stacklevel=2,
            )
            return {}
        return dict(_network_params)


def _set_network_params(params: dict[str, Any] | None) -> None:
    global _network_params
    with _lock:
        _network_params = params


def network_params_for(spec: WorkerSpec) -> dict[str, Any]:
    """This rank's parameters, from every rank's (address, free port) in rank order."""
    peers = spec.peers
    if len(peers) != spec.rank.world_size:
        raise RuntimeError(
            f"LightGBM's network needs every rank's address; this worker knows {len(peers)} "
            f"of {spec.rank.world_size} (a worker group that does not set WorkerSpec.peers)."
        )
    me = peers[spec.rank.world_rank]
    return {
        "num_machines": spec.rank.world_size,
        "local_listen_port": me.free_port,
        "machines": ",".join(f"{p.node_ip}:{p.free_port}" for p in peers),
    }


@dataclass(init=False)
class LightGBMConfig(BackendConfig):
    """LightGBM's data-parallel set-up; no options (as in Ray)."""

    extra: dict[str, Any] = field(default_factory=dict)

    def __init__(self) -> None:
        self.extra = {}

    @property
    def backend_name(self) -> str | None:
        return "lightgbm"

    def to_dict(self) -> dict[str, Any]:
        return {}


@dataclass
class LightGBMBackend:
    """Per rank: network parameters in, thread limit on; both undone at the end."""

    def on_start(self, spec: WorkerSpec) -> None:
        self._limits = limit_threads(spec, "lightgbm")
        _set_network_params(network_params_for(spec))

    def on_shutdown(self) -> None:
        _set_network_params(None)
        self.__dict__.pop("_limits", None)
