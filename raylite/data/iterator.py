"""DataIterator: how a consumer reads a dataset (or one shard of it) batch by batch.

``Dataset.iterator()`` and each result of ``Dataset.streaming_split(n)`` are
DataIterators. They are picklable: a split iterator can be sent to a Train
worker actor and iterated there once per epoch.

Batches: ``iter_batches`` yields dicts of numpy arrays by default;
``iter_torch_batches`` yields dicts of ``torch.Tensor``. Columns that cannot
become tensors (strings, Python objects, ragged lists) stay numpy arrays in the
torch batch (raylite's documented difference from Ray, which raises there), so
``batch["text"]`` works next to ``batch["label"]``.

Epochs: ``iter_rows``/``iter_batches``/``iter_torch_batches`` return an
*iterable* (as Ray does), not a one-shot generator: every ``for`` over it runs a
new epoch. Code that builds the loader once and loops over it per epoch
(``loader = shard.iter_torch_batches(...)``, then ``for epoch ...: for batch in
loader``) therefore trains on the full data every epoch.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

import numpy as np
import pyarrow as pa

from raylite.data._internal.submitter import get_submitter
from raylite.data.block import Block, concat_blocks, iter_table_rows, rebatch_blocks, table_to_batch

_END = object()
T = TypeVar("T")


class EpochIterable(Iterable[T], Generic[T]):
    """What the ``iter_*`` methods return: each ``iter()`` starts a fresh pass (epoch).

    Why not a generator: a generator is spent after one pass, so a loader built once
    and looped over per epoch would silently train on epoch 0 only. ``next()`` on the
    object itself also works (it walks one pass kept inside), for code that pulls a
    single batch with ``next(ds.iter_batches())``.
    """

    def __init__(self, make: Callable[[], Iterator[T]]) -> None:
        self._make = make
        self._current: Iterator[T] | None = None

    def __iter__(self) -> Iterator[T]:
        return self._make()

    def __next__(self) -> T:
        if self._current is None:
            self._current = self._make()
        return next(self._current)

    def __repr__(self) -> str:
        return "<raylite.data iterable: each `for` over it is one pass over the data>"


class DataIterator:
    """Base class: subclasses yield blocks; batching, formats and torch live here.

    ``materialize()`` turns blocks into a MaterializedDataset with ``_to_dataset``, which the
    Dataset making the iterator passes in (dataset.py imports this module, not the reverse).
    """

    _to_dataset: Callable[[list[Block]], Any]

    def _iter_blocks(self) -> Iterator[Block]:
        raise NotImplementedError

    def schema(self) -> Any:
        raise NotImplementedError

    def stats(self) -> str:
        return ""

    # -------------------------------------------------------------- rows / batches

    def iter_rows(self) -> EpochIterable[dict[str, Any]]:
        """Every row as a dict (tensor columns give numpy arrays); re-iterable per epoch."""

        def rows() -> Iterator[dict[str, Any]]:
            for block in self._iter_blocks():
                yield from iter_table_rows(block)

        return EpochIterable(rows)

    def iter_batches(
        self,
        *,
        prefetch_batches: int = 1,
        batch_size: int | None = 256,
        batch_format: str | None = "default",
        drop_last: bool = False,
        local_shuffle_buffer_size: int | None = None,
        local_shuffle_seed: int | None = None,
        _collate_fn: Callable[[Any], Any] | None = None,
    ) -> EpochIterable[Any]:
        """Batches of ``batch_size`` rows (None: one per block) in ``batch_format``.

        Returns an iterable: each ``for`` over it is one epoch over the data.
        """
        if batch_size is not None and batch_size <= 0:
            raise ValueError(f"batch_size must be a positive integer or None, got {batch_size}")
        if batch_format not in ("default", "numpy", "pandas", "pyarrow", "arrow", None):
            raise ValueError(
                f"batch_format must be one of 'default', 'numpy', 'pandas', 'pyarrow', got {batch_format!r}"
            )

        def batches() -> Iterator[Any]:
            blocks = _prefetch(self._iter_blocks(), prefetch_batches)
            tables = rebatch_tables(blocks, batch_size, drop_last, local_shuffle_buffer_size, local_shuffle_seed)
            for table in tables:
                batch = table_to_batch(table, batch_format)
                yield _collate_fn(batch) if _collate_fn is not None else batch

        return EpochIterable(batches)

    def iter_torch_batches(
        self,
        *,
        prefetch_batches: int = 1,
        batch_size: int | None = 256,
        dtypes: Any = None,
        device: str = "auto",
        collate_fn: Callable[[dict[str, np.ndarray]], Any] | None = None,
        drop_last: bool = False,
        local_shuffle_buffer_size: int | None = None,
        local_shuffle_seed: int | None = None,
    ) -> EpochIterable[Any]:
        """Batches as dicts of torch tensors; re-iterable, one epoch per ``for``.

        Numeric and bool columns (including fixed-shape tensor and equal-length list
        columns, stacked to n-d) become tensors; strings, Python objects and ragged
        lists stay numpy arrays.
        """
        if collate_fn is not None:
            conv: Callable[[Any], Any] = collate_fn
        else:
            dev = _resolve_device(device)

            def conv(batch: dict[str, np.ndarray]) -> dict[str, Any]:
                return numpy_batch_to_torch(batch, dtypes, dev)

        return self.iter_batches(
            prefetch_batches=prefetch_batches, batch_size=batch_size, batch_format="numpy",
            drop_last=drop_last, local_shuffle_buffer_size=local_shuffle_buffer_size,
            local_shuffle_seed=local_shuffle_seed, _collate_fn=conv,
        )

    def iter_tf_batches(
        self,
        *,
        prefetch_batches: int = 1,
        batch_size: int | None = 256,
        dtypes: Any = None,
        drop_last: bool = False,
        local_shuffle_buffer_size: int | None = None,
        local_shuffle_seed: int | None = None,
    ) -> EpochIterable[Any]:
        """Batches as dicts of ``tf.Tensor`` (``dtypes``: one dtype or a dict by column);
        re-iterable, one epoch per ``for``."""
        from raylite.data._internal.tf_batches import import_tf, numpy_batch_to_tf

        import_tf()
        return self.iter_batches(
            prefetch_batches=prefetch_batches, batch_size=batch_size, batch_format="numpy",
            drop_last=drop_last, local_shuffle_buffer_size=local_shuffle_buffer_size,
            local_shuffle_seed=local_shuffle_seed, _collate_fn=lambda b: numpy_batch_to_tf(b, dtypes),
        )

    def to_tf(
        self,
        feature_columns: str | list[str],
        label_columns: str | list[str],
        *,
        additional_columns: str | list[str] | None = None,
        prefetch_batches: int = 1,
        batch_size: int = 1,
        drop_last: bool = False,
        local_shuffle_buffer_size: int | None = None,
        local_shuffle_seed: int | None = None,
        feature_type_spec: Any = None,
        label_type_spec: Any = None,
        additional_type_spec: Any = None,
    ) -> Any:
        """A ``tf.data.Dataset`` yielding ``(features, labels)`` (and ``additional`` when asked):
        a string names one column (one tensor), a list several (a dict of tensors). Each pass over
        it (each Keras epoch) reads this iterator again."""
        from raylite.data._internal.tf_batches import to_tf

        def batches() -> Any:
            return self.iter_batches(
                prefetch_batches=prefetch_batches, batch_size=batch_size, batch_format="numpy",
                drop_last=drop_last, local_shuffle_buffer_size=local_shuffle_buffer_size,
                local_shuffle_seed=local_shuffle_seed)

        schema = self.schema()
        base = getattr(schema, "base_schema", schema)
        return to_tf(batches, base, feature_columns, label_columns, additional_columns,
                     feature_type_spec, label_type_spec, additional_type_spec)

    def to_torch(self, **kwargs: Any) -> Any:  # pragma: no cover - legacy Ray API
        raise NotImplementedError("to_torch() was removed in Ray 2.x; use iter_torch_batches().")

    def materialize(self) -> Any:
        """All of this iterator's rows as a MaterializedDataset."""
        return self._to_dataset(list(self._iter_blocks()) or [pa.table({})])


def _resolve_device(device: Any) -> Any:
    import torch

    if device in (None, "auto"):
        return None  # stay on CPU; Train moves batches with get_device()
    return torch.device(device)


def numpy_batch_to_torch(batch: dict[str, np.ndarray], dtypes: Any, device: Any) -> dict[str, Any]:
    """numpy batch -> tensors for numeric/bool columns; other columns are kept as numpy arrays."""
    import torch

    out: dict[str, Any] = {}
    for name, arr in batch.items():
        if not isinstance(arr, np.ndarray) or arr.dtype == object or arr.dtype.kind in "USV":
            out[name] = arr
            continue
        if not arr.flags.writeable:
            arr = arr.copy()
        t = torch.from_numpy(arr)
        dtype = dtypes.get(name) if isinstance(dtypes, dict) else dtypes
        if dtype is not None:
            t = t.to(dtype)
        if device is not None:
            t = t.to(device)
        out[name] = t
    return out


def rebatch_tables(
    blocks: Iterator[Block],
    batch_size: int | None,
    drop_last: bool = False,
    shuffle_buffer: int | None = None,
    seed: int | None = None,
) -> Iterator[Block]:
    """Cut a stream of blocks into tables of ``batch_size`` rows (optionally locally shuffled)."""
    if shuffle_buffer:
        yield from _shuffled_batches(blocks, batch_size or 256, drop_last, shuffle_buffer, seed)
        return
    yield from rebatch_blocks(blocks, batch_size, drop_last)


def _shuffled_batches(blocks: Iterator[Block], batch_size: int, drop_last: bool, buffer_rows: int,
                      seed: int | None) -> Iterator[Block]:
    rng = np.random.default_rng(seed)
    buf: list[Block] = []
    held = 0

    def shuffled() -> Block:
        table = concat_blocks(buf)
        return table.take(pa.array(rng.permutation(table.num_rows)))

    for b in blocks:
        buf.append(b)
        held += b.num_rows
        if held >= buffer_rows + batch_size:
            table = shuffled()
            offset = 0
            while table.num_rows - offset >= buffer_rows + batch_size:
                yield table.slice(offset, batch_size)
                offset += batch_size
            buf, held = [table.slice(offset)], table.num_rows - offset
    if held:
        table = shuffled()
        for offset in range(0, table.num_rows, batch_size):
            part = table.slice(offset, batch_size)
            if part.num_rows < batch_size and drop_last:
                break
            yield part


def _prefetch(blocks: Iterator[Block], depth: int) -> Iterator[Block]:
    """Fetch up to ``depth`` blocks ahead on a helper thread while the consumer works."""
    if depth <= 0:
        yield from blocks
        return
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for b in blocks:
                while not stop.is_set():
                    try:
                        q.put(b, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    break
        except BaseException as e:  # forwarded to the consumer
            q.put(e)
        else:
            q.put(_END)
        finally:
            close = getattr(blocks, "close", None)
            if stop.is_set() and close is not None:
                close()

    t = threading.Thread(target=produce, name="data-prefetch", daemon=True)
    t.start()
    try:
        while True:
            item = q.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while t.is_alive():
            try:
                q.get_nowait()
            except queue.Empty:
                t.join(timeout=0.05)


class _DatasetIterator(DataIterator):
    """Iterates a whole Dataset; each iteration runs its plan anew (one epoch)."""

    def __init__(self, dataset: Any, to_dataset: Callable[[list[Block]], Any]) -> None:
        self._dataset = dataset
        self._to_dataset = to_dataset

    def _iter_blocks(self) -> Iterator[Block]:
        return self._dataset._iter_blocks()

    def schema(self) -> Any:
        return self._dataset.schema()

    def stats(self) -> str:
        return self._dataset.stats()

    def __repr__(self) -> str:
        return f"DataIterator({self._dataset!r})"


class StreamSplitDataIterator(DataIterator):
    """Shard ``index`` of ``Dataset.streaming_split(n)``; reads blocks from the split coordinator.

    Iterating it starts an epoch: the coordinator waits until all ``n`` shards
    asked for that epoch, runs the dataset once, and hands each shard its part
    (disjoint rows; the same row count per shard when ``equal=True``).
    """

    def __init__(self, coordinator: Any, index: int, n: int,
                 to_dataset: Callable[[list[Block]], Any]) -> None:
        self._coordinator = coordinator
        self._index = index
        self._n = n
        self._to_dataset = to_dataset  # a module-level function: pickled by name

    def _call(self, method: str, *args: Any) -> Any:
        sub = get_submitter()
        return sub.call_actor(self._coordinator, method, list(args), num_returns=1)[0]

    def _iter_blocks(self) -> Iterator[Block]:
        sub = get_submitter()
        epoch = sub.get([self._call("start_epoch", self._index)])[0]
        pending = self._call("get", epoch, self._index)
        while True:
            pieces = sub.get([pending])[0]
            if pieces is None:
                return
            pending = self._call("get", epoch, self._index)  # ask for the next while we read this one
            blocks = sub.get([ref for ref, _, _ in pieces])
            for block, (_, start, end) in zip(blocks, pieces):
                yield block.slice(start, end - start)

    def schema(self) -> Any:
        return get_submitter().get([self._call("schema")])[0]

    def stats(self) -> str:
        return get_submitter().get([self._call("stats")])[0]

    def __repr__(self) -> str:
        return f"StreamSplitDataIterator(index={self._index}, n={self._n})"
