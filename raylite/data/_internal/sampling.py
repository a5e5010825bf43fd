"""Row sampling stages: ``random_sample`` and ``streaming_train_test_split``.

Both keep a block's rows by a per-row draw, block by block inside the map task
(no shuffle, order kept). The draws come from a generator seeded by
``(seed, task index, block number)``, so a seeded run draws the same rows every
time the plan executes; that is what lets the two halves of a streaming split,
which execute separately, stay complementary.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from raylite.data._internal.transforms import Stage, current_task_index
from raylite.data.block import Block


def _draws(seed: int, block_no: int, n: int) -> np.ndarray:
    rng = np.random.default_rng([seed & ((1 << 63) - 1), current_task_index(), block_no])
    return rng.random(n)


def fresh_seed() -> int:
    return int(np.random.SeedSequence().entropy % (1 << 62))


@dataclass
class RandomSampleStage(Stage):
    """Keep each row with probability ``fraction``."""

    fraction: float
    seed: int | None = None
    name: str = "RandomSample"

    def apply(self, tables: Iterator[Block]) -> Iterator[Block]:
        seed = self.seed if self.seed is not None else fresh_seed()
        for block_no, table in enumerate(tables):
            if not table.num_rows:
                yield table
                continue
            yield table.filter(pa.array(_draws(seed, block_no, table.num_rows) < self.fraction))


@dataclass
class SplitStage(Stage):
    """One half of ``streaming_train_test_split``: rows whose draw (or key hash) falls in the test share."""

    test_size: float
    split_type: str
    hash_column: str | None
    seed: int
    keep_test: bool
    name: str = "TrainTestSplit"

    def apply(self, tables: Iterator[Block]) -> Iterator[Block]:
        for block_no, table in enumerate(tables):
            if not table.num_rows:
                yield table
                continue
            if self.split_type == "hash":
                from raylite.data._internal.join import _key_hash

                assert self.hash_column is not None
                if self.hash_column not in table.column_names:
                    raise KeyError(f"streaming_train_test_split: hash_column {self.hash_column!r} not in the "
                                   f"dataset's columns {table.column_names}")
                h = _key_hash(table.column(self.hash_column)) ^ np.uint64(self.seed)
                share = (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)
            else:
                share = _draws(self.seed, block_no, table.num_rows)
            is_test = share < self.test_size
            yield table.filter(pa.array(is_test if self.keep_test else ~is_test))
