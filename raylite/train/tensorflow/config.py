"""TensorflowConfig and the backend that writes each rank's ``TF_CONFIG``.

``tf.distribute.MultiWorkerMirroredStrategy`` finds its peers in the ``TF_CONFIG``
environment variable: the cluster's worker addresses and this process's index.
Every training worker reported an address and a free port when the group was placed;
each rank gets the whole list in rank order and its own index before the loop starts,
so the strategy is built inside the loop with no arguments.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from raylite.train.config import BackendConfig

if TYPE_CHECKING:
    from raylite.train._internal.session import WorkerSpec


def tf_config_for(spec: WorkerSpec) -> dict[str, Any]:
    peers = spec.peers
    if len(peers) != spec.rank.world_size:
        raise RuntimeError(f"TF_CONFIG needs every rank's address; this worker knows {len(peers)} "
                           f"of {spec.rank.world_size}.")
    return {"cluster": {"worker": [f"{p.node_ip}:{p.free_port}" for p in peers]},
            "task": {"type": "worker", "index": spec.rank.world_rank}}


@dataclass(init=False)
class TensorflowConfig(BackendConfig):
    """TensorFlow's multi-worker set-up; no options (as in Ray)."""

    extra: dict[str, Any] = field(default_factory=dict)

    def __init__(self) -> None:
        self.extra = {}

    @property
    def backend_name(self) -> str | None:
        return "tensorflow"

    def to_dict(self) -> dict[str, Any]:
        return {}


@dataclass
class TensorflowBackend:
    """Every rank is started at once (``start_ranks_together``): building
    ``MultiWorkerMirroredStrategy`` waits in TensorFlow's C++ for all ranks to join the
    coordination service while holding the GIL, so a rank-0-first start deadlocks: rank 0's
    ``start`` call cannot return (its thread is stuck) and rank 1 is never started."""

    start_ranks_together: bool = True

    def on_start(self, spec: WorkerSpec) -> None:
        os.environ["TF_CONFIG"] = json.dumps(tf_config_for(spec))

    def on_shutdown(self) -> None:
        os.environ.pop("TF_CONFIG", None)
