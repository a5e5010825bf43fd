"""A joblib parallel backend whose workers are a raylite.util.multiprocessing.Pool.

joblib's own multiprocessing backend already drives a `multiprocessing.Pool` through
`apply_async(..., callback=..., error_callback=...)`, with its batching and error handling. This
backend keeps all of that and swaps the pool for one whose processes are raylite actors, so every
`joblib.Parallel` (scikit-learn's `GridSearchCV`, `cross_val_score`, ...) fans out over the cluster.
"""

from __future__ import annotations

from typing import Any

from joblib._parallel_backends import FallbackToBackend, MultiprocessingBackend, SequentialBackend

import raylite
from raylite.util.multiprocessing import Pool


class RayBackend(MultiprocessingBackend):
    """joblib's backend "ray": batches of calls run as chunks on a pool of raylite actors.

    `ray_remote_args` (a backend keyword argument) are actor options for the pool's actors.
    """

    supports_inner_max_num_threads = False

    def __init__(self, nesting_level: int | None = None, inner_max_num_threads: int | None = None,
                 ray_remote_args: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(nesting_level=nesting_level, inner_max_num_threads=inner_max_num_threads, **kwargs)
        self._ray_remote_args = ray_remote_args

    @staticmethod
    def _cluster_cpus() -> int:
        if not raylite.is_initialized():
            raylite.init()
        return max(1, int(raylite.cluster_resources().get("CPU", 1)))

    def effective_n_jobs(self, n_jobs: int | None) -> int:
        """joblib's meaning of n_jobs (-1 = every CPU, -2 = all but one...) against the cluster's CPUs."""
        if n_jobs == 0:
            raise ValueError("n_jobs == 0 in Parallel has no meaning")
        if n_jobs is None:
            return 1
        cpus = self._cluster_cpus()
        if n_jobs < 0:
            return max(cpus + 1 + n_jobs, 1)
        return min(n_jobs, cpus)  # more pool actors than CPUs would wait for each other

    def configure(self, n_jobs: int | None = 1, parallel: Any = None, prefer: str | None = None,
                  require: str | None = None, **kwargs: Any) -> int:
        if n_jobs in (None, 1):  # joblib's convention: one job runs in this process
            raise FallbackToBackend(SequentialBackend(nesting_level=self.nesting_level))
        remote_args = kwargs.pop("ray_remote_args", None) or self._ray_remote_args
        n = self.effective_n_jobs(n_jobs)
        self._pool = Pool(processes=n, ray_remote_args=remote_args)
        self.parallel = parallel
        return n

    def terminate(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool = None
        self.reset_batch_stats()
