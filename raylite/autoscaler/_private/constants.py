"""`ray.autoscaler._private.constants`: `RAY_PROCESSES`, how to find a cluster's processes in
`ps` (Ray's tests and tools match each entry against a process's name or its command line).

Each entry is `[keyword, by_name]`: with by_name the keyword is looked for in the process name
(Linux keeps its first 15 characters), otherwise in the whole command line. raylite runs one
daemon per node (head and node together on the head host), its workers titled `ray::...` as
Ray's are, and Serve's REST agent where one is started.
"""

from __future__ import annotations

import sys

RAY_PROCESSES: list[list] = [
    ["raylite._core.cluster.daemon", False],  # a node's daemon (the head's too)
    ["ray::", sys.platform != "darwin"],  # workers (setproctitle changes only argv on macOS)
    ["raylite.serve._internal.rest_agent", False],
]

__all__ = ["RAY_PROCESSES"]
