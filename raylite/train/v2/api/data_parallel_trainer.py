"""``ray.train.v2.api.data_parallel_trainer``'s path: the same ``DataParallelTrainer`` as ``raylite.train``."""

from raylite.train.data_parallel_trainer import DataParallelTrainer

__all__ = ["DataParallelTrainer"]
