"""`ray._private.worker`: the names libraries read from it (global_worker and the worker modes),
re-exported from the compatibility module raylite/_private/compat_names.py."""

from raylite._private.compat_names import (
    RESTORE_WORKER_MODE,
    SCRIPT_MODE,
    SPILL_WORKER_MODE,
    WORKER_MODE,
    GlobalWorker,
    global_worker,
)

Worker = GlobalWorker  # Ray's class name

__all__ = ["RESTORE_WORKER_MODE", "SCRIPT_MODE", "SPILL_WORKER_MODE", "WORKER_MODE", "GlobalWorker",
           "Worker", "global_worker"]
