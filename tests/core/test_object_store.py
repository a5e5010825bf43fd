"""The shared-memory store on a real node: zero-copy reads, lifetimes, flat memory, one copy per node."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

import raylite as ray
from raylite._core import protocol as P
from raylite._core import runtime
from tests.conftest import wait_for

MIB = 1 << 20


def _store_dir() -> str:
    return runtime.client().store_dir


def _object_files() -> set[str]:
    return {n for n in os.listdir(_store_dir()) if n != "pool"}


def _node_info() -> P.GetNodeInfoReply:
    return runtime.client().node_request(P.GetNodeInfo(), timeout=10)


def _shm_bytes() -> int:
    """Bytes of files under the store directory (objects and recycled segments)."""
    total = 0
    for root, _dirs, files in os.walk(_store_dir()):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def _mapped_file(addr: int) -> str:
    """The file mapped at address `addr` in this process ("" if anonymous memory)."""
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= addr < hi:
                return parts[5] if len(parts) > 5 else ""
    return ""


def test_numpy_get_is_a_read_only_view_into_shared_memory(cluster):
    arr = np.arange(4 * MIB // 8, dtype=np.float64)
    ref = ray.put(arr)
    out = ray.get(ref)
    path = _mapped_file(out.ctypes.data)
    assert path == os.path.join(_store_dir(), ref.hex())
    assert not out.flags.writeable
    with pytest.raises(ValueError):
        out[0] = 1.0
    assert np.array_equal(out, arr)


def test_dict_of_arrays_and_arrow_table_are_zero_copy(cluster):
    pa = pytest.importorskip("pyarrow")
    value = {"x": np.ones(MIB // 8), "t": pa.table({"c": np.arange(MIB // 8)})}
    out = ray.get(ray.put(value))
    assert _mapped_file(out["x"].ctypes.data).startswith(_store_dir())
    buf = out["t"].column("c").chunks[0].buffers()[1]
    assert _mapped_file(buf.address).startswith(_store_dir())
    assert out["t"].column("c").to_pylist()[:3] == [0, 1, 2]


def test_torch_tensor_is_zero_copy(cluster):
    torch = pytest.importorskip("torch")
    t = torch.arange(MIB // 4, dtype=torch.float32)
    out = ray.get(ray.put(t))
    assert _mapped_file(out.data_ptr()).startswith(_store_dir())
    assert torch.equal(out, t)


def test_views_keep_memory_alive_and_the_file_goes_with_the_last_ref(cluster):
    ref = ray.put(np.full(2 * MIB // 8, 3.0))
    name = ref.hex()
    view = ray.get(ref)[::2]
    del ref
    gc.collect()
    wait_for(lambda: name not in _object_files(), what="the freed object's file to leave /dev/shm")
    assert float(view.sum()) == 3.0 * (MIB // 8)  # the mapping outlives the file name
    wait_for(lambda: all(o[0].hex() != name for o in _node_info().objects), what="the node to forget it")


def test_mapped_segments_are_never_recycled_under_a_reader(cluster):
    first = ray.put(np.full(4 * MIB // 8, 1.0))
    view = ray.get(first)
    del first
    gc.collect()
    # same size: the next put would love to reuse the freed segment, but `view` maps it
    again = [ray.put(np.full(4 * MIB // 8, 2.0)) for _ in range(3)]
    assert float(view.max()) == 1.0 and float(view.min()) == 1.0
    assert all(float(ray.get(r)[0]) == 2.0 for r in again)


def test_put_drop_loop_of_100mib_objects_keeps_memory_flat(cluster):
    arr = np.random.default_rng(1).integers(0, 255, 100 * MIB, dtype=np.uint8)
    ref = ray.put(arr)
    del ref
    gc.collect()
    wait_for(lambda: _node_info().store_used_bytes < 100 * MIB, what="the first object to be freed")
    peak = 0
    for i in range(100):
        ref = ray.put(arr)
        if i % 10 == 0:
            assert ray.get(ref)[12345] == arr[12345]
        del ref
        peak = max(peak, _shm_bytes())
    gc.collect()
    wait_for(lambda: _node_info().store_used_bytes < 100 * MIB, what="the loop's objects to be freed")
    # one live object plus recycled segments at most: never a pile-up of 100 MiB files
    assert peak <= 3 * 100 * MIB + 10 * MIB, f"shared memory grew to {peak / MIB:.0f} MiB"
    stats = _node_info().store_stats
    assert stats["pool_bytes"] <= 2 * 100 * MIB + MIB


def test_one_copy_when_a_large_object_goes_to_many_tasks(cluster):
    arr = np.ones(16 * MIB // 8)
    ref = ray.put(arr)
    before = _node_info().store_used_bytes

    @ray.remote
    def where(a):
        import os as _os

        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                if lo <= a.ctypes.data < hi:
                    return parts[5], bool(a.flags.writeable), float(a.sum()), _os.getpid()
        return "", bool(a.flags.writeable), float(a.sum()), _os.getpid()

    results = ray.get([where.remote(ref) for _ in range(10)])
    for path, writeable, total, _pid in results:
        assert path == os.path.join(_store_dir(), ref.hex())
        assert not writeable and total == float(arr.size)
    # no per-task copies were stored (objects of earlier tests may still be freed meanwhile,
    # so the store may shrink; it must not grow)
    assert _node_info().store_used_bytes <= before


def test_store_capacity_and_usage_are_reported(cluster):
    info = _node_info()
    assert info.store_capacity_bytes >= 64 * MIB
    ref = ray.put(np.zeros(8 * MIB // 8))
    assert _node_info().store_used_bytes >= info.store_used_bytes + 8 * MIB
    del ref


def test_writing_to_a_zero_copy_tensor_is_private_to_the_writer(cluster):
    torch = pytest.importorskip("torch")
    ref = ray.put(torch.zeros(MIB // 4))
    mine = ray.get(ref)
    mine.add_(1.0)  # copy-on-write: no crash, and nobody else sees it
    assert float(mine.sum()) == float(MIB // 4)
    assert float(ray.get(ref).sum()) == 0.0

    @ray.remote
    def total(t):
        return float(t.sum())

    assert ray.get(total.remote(ref)) == 0.0


def test_objects_of_an_exited_owner_are_freed(cluster):
    @ray.remote
    class Maker:
        def make(self):
            self.ref = ray.put(np.ones(MIB, dtype=np.uint8))
            return self.ref.hex()

    maker = Maker.remote()
    name = ray.get(maker.make.remote())
    assert name in _object_files()
    ray.kill(maker)
    wait_for(lambda: name not in _object_files(), what="the dead owner's object to be freed")
    wait_for(lambda: all(o[0].hex() != name for o in _node_info().objects), what="the node to forget it")


def test_return_values_outlive_the_worker_that_wrote_them(cluster):
    @ray.remote
    class Maker:
        def make(self):
            return np.full(MIB, 7, dtype=np.uint8)

    maker = Maker.remote()
    ref = maker.make.remote()
    ray.wait([ref])
    ray.kill(maker)  # the writer exits; the caller owns the return value
    gc.collect()
    assert int(ray.get(ref)[123]) == 7
    assert ref.hex() in _object_files()


def test_room_reserved_by_a_writer_that_dies_mid_write_comes_back(cluster):
    @ray.remote(max_retries=0)
    def reserve_and_die(oid: bytes, owner: str):
        from raylite._core import protocol as _P
        from raylite._core import runtime as _rt

        # like a task writing its return value, which the caller (still alive) owns
        _rt.client().node_request(_P.CreateObject(oid, 32 * MIB, owner), timeout=10)
        os._exit(1)

    oid = os.urandom(20)
    with pytest.raises(ray.exceptions.RayError):
        ray.get(reserve_and_die.remote(oid, runtime.client().address))
    wait_for(lambda: all(o[0] != oid for o in _node_info().objects), what="the half-written object to be dropped")
