"""`ray._private.worker`: the names libraries read from it (global_worker and the worker modes),
re-exported from the compatibility module raylite/_private/compat_names.py."""

from raylite._core.cluster.driver import log_unhandled_error
from raylite._private.compat_names import (
    RESTORE_WORKER_MODE,
    SCRIPT_MODE,
    SPILL_WORKER_MODE,
    WORKER_MODE,
    GlobalWorker,
    global_worker,
)

Worker = GlobalWorker  # Ray's class name
# what a driver calls with a task's error that no get() read before its last ref went; a
# program may replace it (Ray's tests count the reports with it)
_unhandled_error_handler = log_unhandled_error

__all__ = ["RESTORE_WORKER_MODE", "SCRIPT_MODE", "SPILL_WORKER_MODE", "WORKER_MODE", "GlobalWorker",
           "Worker", "global_worker"]
