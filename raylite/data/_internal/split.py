"""streaming_split: one execution of a dataset shared by ``n`` consumers.

A ``SplitCoordinator`` actor (threaded, ``num_cpus=0``) runs the streaming
executor and answers ``get(epoch, i)`` calls from the ``n`` shard iterators
with pieces ``[(block_ref, start, end)]``: the consumer slices the block
itself, so no block is copied to equalize shards.

Epochs: each shard's iteration calls ``start_epoch(i)``; the coordinator waits
until all ``n`` shards have asked for epoch ``k`` and then runs the dataset
again. Rows are disjoint across shards and, with ``equal=True``, each shard
gets exactly ``total // n`` rows (the remainder is dropped, as in Ray).

Equal-split rule (``OutputSplitter``): with ``seen`` rows received so far, no
shard may have been given more than ``seen // n``. Since the total is at least
``seen``, no shard ever exceeds its final share, so the final top-up never
needs to take rows back. A shard that is ahead waits for more data (the other
shards consume meanwhile).
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from raylite.data.block import BlockMetadata

Piece = tuple[Any, int, int]  # block ref, start row, end row


class OutputSplitter:
    """Pure bookkeeping of which rows go to which shard (see the module docstring)."""

    def __init__(self, n: int, equal: bool) -> None:
        self.n = n
        self.equal = equal
        self.buffer: deque[Piece] = deque()
        self.seen = 0
        self.given = [0] * n
        self.exhausted = False

    def add(self, blocks: list[tuple[Any, BlockMetadata]]) -> None:
        for ref, meta in blocks:
            rows = meta.num_rows or 0
            if rows:
                self.buffer.append((ref, 0, rows))
                self.seen += rows

    def finish(self) -> None:
        self.exhausted = True

    def take(self, i: int) -> list[Piece] | None:
        """Pieces for shard ``i`` now; [] means "wait for more data"; None means "no more, ever"."""
        if not self.equal:
            if self.buffer:
                piece = self.buffer.popleft()
                self.given[i] += piece[2] - piece[1]
                return [piece]
            return None if self.exhausted else []
        allowance = self.seen // self.n - self.given[i]
        if allowance <= 0 or not self.buffer:
            return None if self.exhausted else []
        out: list[Piece] = []
        while allowance > 0 and self.buffer:
            ref, start, end = self.buffer.popleft()
            take = min(allowance, end - start)
            out.append((ref, start, start + take))
            if start + take < end:
                self.buffer.appendleft((ref, start + take, end))
            allowance -= take
            self.given[i] += take
        return out


class SplitCoordinator:
    """Actor behind ``streaming_split``: one execution per epoch, shared by n shards."""

    def __init__(self, dataset: Any, n: int, equal: bool, context: Any) -> None:
        from raylite.data.context import DataContext

        DataContext._set_current(context)
        self._dataset = dataset
        self._n = n
        self._equal = equal
        self._cond = threading.Condition()
        self._requested = [0] * n  # epochs each shard has asked for
        self._epoch = 0
        self._executor: Any = None
        self._splitter = OutputSplitter(n, equal)
        self._pulling = False
        self._last_stats = ""
        # pieces handed to each shard stay referenced here until the shard's second next call,
        # by which time it holds (borrows) them itself; the epoch's pieces until the next epoch
        self._recent: list[deque[list[Piece]]] = [deque(maxlen=2) for _ in range(n)]

    def start_epoch(self, index: int) -> int:
        with self._cond:
            self._requested[index] += 1
            epoch = self._requested[index]
            self._cond.notify_all()
            while min(self._requested) < epoch:
                self._cond.wait(timeout=1.0)
            if self._epoch < epoch:
                self._begin(epoch)
            return epoch

    def _begin(self, epoch: int) -> None:
        if self._executor is not None:
            self._last_stats = self._executor.stats_summary()
            self._executor.shutdown()
        self._epoch = epoch
        self._recent = [deque(maxlen=2) for _ in range(self._n)]
        self._splitter = OutputSplitter(self._n, self._equal)
        self._executor = self._dataset._start_execution()

    def get(self, epoch: int, index: int) -> list[Piece] | None:
        while True:
            with self._cond:
                if epoch != self._epoch:
                    raise RuntimeError(
                        f"streaming_split shard {index} asked for epoch {epoch} while epoch {self._epoch} "
                        "runs: every shard must iterate each epoch (all n consumers in step)."
                    )
                pieces = self._splitter.take(index)
                if pieces:
                    self._recent[index].append(pieces)
                if pieces is None or pieces:
                    return pieces
                if self._pulling:
                    self._cond.wait(timeout=1.0)
                    continue
                self._pulling = True
                executor = self._executor
            try:  # pull one bundle without holding the lock
                bundle = executor.next_bundle()
            finally:
                with self._cond:
                    self._pulling = False
                    self._cond.notify_all()
            with self._cond:
                if epoch != self._epoch:
                    continue
                if bundle is None:
                    self._splitter.finish()
                else:
                    self._splitter.add(bundle.blocks)
                self._cond.notify_all()

    def schema(self) -> Any:
        return self._dataset.schema()

    def stats(self) -> str:
        if self._executor is not None:
            return self._executor.stats_summary()
        return self._last_stats
