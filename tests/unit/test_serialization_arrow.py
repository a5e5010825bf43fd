"""A sliced Arrow table is stored at its own size, not its parent's."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from raylite._core import serialization as ser


def _stored_bytes(value) -> int:
    return sum(len(memoryview(b)) for b in ser.serialize(value).buffers)


def test_slices_are_compacted_and_round_trip():
    parent = pa.table({"x": np.arange(2_000_000), "s": pa.array([str(i % 7) for i in range(2_000_000)])})
    piece = parent.slice(1_000, 500)
    assert _stored_bytes(piece) < 64 * 1024  # the parent is ~30 MB
    so = ser.serialize(piece)
    back = ser.deserialize(so.meta, so.buffers)
    assert back.equals(piece)
    batch = parent.to_batches()[0].slice(10, 20)
    so = ser.serialize({"batch": batch})
    assert ser.deserialize(so.meta, so.buffers)["batch"].equals(batch)
    assert _stored_bytes(parent) >= parent.nbytes  # whole tables are not copied
