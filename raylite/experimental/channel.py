"""raylite.experimental.channel: Core's channels, for compiled graphs (`raylite.dag`).

A channel is a connection set up once between two processes of the cluster that then carries
framed values with no per-message scheduling (see `raylite._core.transport.channels` for the frame
format and the security checks). Ray's compiled graphs use the same idea under the name
`ray.experimental.channel`; this module is what `raylite.dag.compiled_dag_node` builds on.
"""

from __future__ import annotations

from typing import Any

from raylite._core import runtime
from raylite._core.transport.channels import (
    BROKEN,
    ERROR,
    OK,
    STOP,
    TICK,
    ChannelClosedError,
    Endpoint,
)
from raylite._core.transport.channels import connect as _connect
from raylite._core.worker.cgraph_runner import DRIVER, dumps, loads_error

__all__ = ["BROKEN", "DRIVER", "ERROR", "OK", "STOP", "TICK", "ChannelClosedError", "Endpoint",
           "connect", "dumps", "loads_error"]


def connect(address: dict[str, Any], me: str = DRIVER, timeout_s: float = 30.0) -> Endpoint:
    """Connect this process to a channel listener of the cluster it is connected to."""
    client = runtime.client()
    if client is None:
        raise RuntimeError("raylite is not initialized: call raylite.init() before compiling a graph.")
    return _connect(address, client.token, me, timeout_s)
