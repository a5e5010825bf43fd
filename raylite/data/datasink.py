"""``Datasink`` (Ray's interface for custom writers) and ``Dataset.write_datasink``'s machinery.

A user subclass implements ``write(blocks, ctx)``, called once per write task with
that task's blocks; ``on_write_start()`` runs on the driver before any task,
``on_write_complete(WriteResult)`` after all of them, ``on_write_failed(error)`` if
one failed. A sink whose ``supports_distributed_writes`` is False is written by one
call on the driver, as Ray does.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import pyarrow as pa

from raylite.data._internal.transforms import Stage, current_task_index
from raylite.data.block import Block

WriteReturnType = TypeVar("WriteReturnType")


@dataclass
class TaskContext:
    """What a write task knows about itself (``task_idx`` numbers the tasks from 0)."""

    task_idx: int
    op_name: str = "Write"
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class WriteResult(Generic[WriteReturnType]):
    """Totals over all write tasks, and each ``write()``'s return value in task order."""

    num_rows: int
    size_bytes: int
    write_returns: list[WriteReturnType]

    @classmethod
    def combine(cls, *results: WriteResult) -> WriteResult:
        return cls(sum(r.num_rows for r in results), sum(r.size_bytes for r in results),
                   [w for r in results for w in r.write_returns])


class Datasink(Generic[WriteReturnType]):
    """Subclass and implement ``write``; pass an instance to ``Dataset.write_datasink``."""

    def on_write_start(self, schema: pa.Schema | None = None) -> None:
        """Called once on the driver before any write task starts."""

    def write(self, blocks: Iterable[Block], ctx: TaskContext) -> WriteReturnType:
        """Write one task's blocks (Arrow tables); the return value reaches ``on_write_complete``."""
        raise NotImplementedError(f"{type(self).__name__} must implement write(blocks, ctx)")

    def on_write_complete(self, write_result: WriteResult[WriteReturnType]) -> None:
        """Called once on the driver after every write task succeeded."""

    def on_write_failed(self, error: Exception) -> None:
        """Called once on the driver when a write task failed (the error is then raised)."""

    def get_name(self) -> str:
        name = type(self).__name__
        return name[: -len("Datasink")] if name.endswith("Datasink") and len(name) > 8 else name

    @property
    def supports_distributed_writes(self) -> bool:
        return True

    @property
    def min_rows_per_write(self) -> int | None:
        return None


@dataclass
class DatasinkWriteStage(Stage):
    """A write task's last stage: hand its blocks to ``sink.write`` and report what it wrote."""

    sink: Any = None
    name: str = "Write"

    def apply(self, tables: Iterator[Block]) -> Iterator[Block]:
        counts = [0, 0]

        def counted() -> Iterator[Block]:
            for t in tables:
                counts[0] += t.num_rows
                counts[1] += t.nbytes
                yield t

        ret = self.sink.write(counted(), TaskContext(current_task_index(), self.name))
        yield pa.table({"num_rows": [counts[0]], "size_bytes": [counts[1]],
                        "write_return": pa.array([pickle.dumps(ret)], pa.binary())})


def collect_result(tables: Iterable[Block]) -> WriteResult:
    rows = size = 0
    returns = []
    for t in tables:
        for r in t.to_pylist():
            rows += r["num_rows"]
            size += r["size_bytes"]
            returns.append(pickle.loads(r["write_return"]))
    return WriteResult(rows, size, returns)
