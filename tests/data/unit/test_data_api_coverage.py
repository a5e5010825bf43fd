"""API entries and behaviours of issue 6 not covered elsewhere: UDF arguments, zero-copy
batches, autoscaling pools, devices, progress bars on and off, preserve_order."""

import io
import sys
import threading

import numpy as np
import pytest
import torch

import raylite.data as rd


def test_fn_args_kwargs_and_constructor_args(local):
    def scale(batch, factor, *, offset):
        return {"id": batch["id"] * factor + offset}

    out = rd.range(4).map_batches(scale, fn_args=(10,), fn_kwargs={"offset": 1}, batch_format="numpy")
    assert [r["id"] for r in out.take_all()] == [1, 11, 21, 31]

    class Add:
        def __init__(self, amount, *, sign):
            self.delta = amount * sign

        def __call__(self, row, extra):
            return {"id": row["id"] + self.delta + extra}

    rows = rd.range(3).map(Add, fn_constructor_args=(5,), fn_constructor_kwargs={"sign": -1},
                           fn_args=(100,), concurrency=1).take_all()
    assert [r["id"] for r in rows] == [95, 96, 97]
    kept = rd.range(10).filter(lambda r, lo: r["id"] >= lo, fn_args=(7,)).take_all()
    assert [r["id"] for r in kept] == [7, 8, 9]


def test_zero_copy_batch_is_read_only_and_default_batches_are_writable(local):
    def touch(batch):
        batch["id"][0] = -1  # in place: needs a writable batch
        return batch

    assert rd.range(3).map_batches(touch).take_all()[0]["id"] == -1
    seen = []

    def peek(batch):
        seen.append(batch["id"].flags.writeable)
        return {"id": batch["id"] + 0}

    rd.range(3).map_batches(peek, zero_copy_batch=True).take_all()
    assert seen and not any(seen)


def test_autoscaling_actor_pool_min_max(local):
    class Ident:
        def __call__(self, batch):
            return batch

    ds = rd.range(64, override_num_blocks=8).map_batches(Ident, concurrency=(1, 2), batch_size=8)
    assert [r["id"] for r in ds.take_all()] == list(range(64))
    assert 1 <= local.actors_started <= 2


def test_iter_torch_batches_device_and_explicit_numpy_format(local):
    batch = next(iter(rd.range(4).iter_torch_batches(batch_size=4, device="cpu", dtypes=torch.float64)))
    assert batch["id"].device.type == "cpu" and batch["id"].dtype == torch.float64
    numpy_batch = next(iter(rd.range(4).iter_batches(batch_size=4, batch_format="numpy")))
    assert isinstance(numpy_batch["id"], np.ndarray)
    with pytest.raises(ValueError, match="batch_format"):
        rd.range(4).iter_batches(batch_format="torch")


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_bars_on_by_default_off_with_one_setting(local, data_context, monkeypatch):
    fake = _Tty()
    monkeypatch.setattr(sys, "stderr", fake)
    data_context.enable_progress_bars = True
    rd.range(50).map(lambda r: r).take_all()
    assert "ReadRange->Map(<lambda>)" in fake.getvalue() and "50 rows" in fake.getvalue()
    fake.seek(0)
    fake.truncate()
    data_context.enable_progress_bars = False
    rd.range(50).map(lambda r: r).take_all()
    assert fake.getvalue() == ""


def test_preserve_order_holds_when_early_blocks_finish_last(local, data_context):
    """A slow first block does not let later blocks overtake it (preserve_order=True; raylite
    keeps block order even when it is False, which Ray does not promise)."""
    release = threading.Event()

    def slow_first(batch):
        if batch["id"][0] == 0:
            assert release.wait(10)  # the last block has run: block 0 finishes last
        elif batch["id"][0] == 30:
            release.set()
        return batch

    for preserve in (True, False):
        release.clear()
        data_context.execution_options.preserve_order = preserve
        ids = [r["id"] for r in rd.range(40, override_num_blocks=4).map_batches(slow_first).take_all()]
        assert ids == list(range(40))
