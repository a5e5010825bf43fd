"""Which GPU devices (and neuron cores, TPU chips, ...: accelerators.OTHER_DEVICE_ENV) a lease
or actor gets, so its worker sees exactly those devices.

Resource accounting (resources.py) says *how much* GPU is free; this says *which* device
ids. Whole-GPU requests take whole free devices, lowest id first; fractional requests
share one device, best fit first, so small requests pack instead of spreading. Amounts
are fixed-point, as in resources.py.
"""

from __future__ import annotations

from collections.abc import Mapping

from raylite._core.accelerators import OTHER_DEVICE_ENV
from raylite._core.resources import _SCALE


def device_amount(request: Mapping[str, int], kind: str = "GPU") -> int:
    """How much of device `kind` (GPU, neuron_cores, ...) a request asks for. A placement-group
    request names a bundle's resource (`GPU_group_0_<pg>`) with the group's wildcard
    (`GPU_group_<pg>`) beside it: counted once; a request that names no bundle index has the
    wildcard alone, and that counts."""
    prefix = kind + "_group_"
    indexed = wildcard = 0
    for name, amount in request.items():
        if name.startswith(prefix):
            rest = name[len(prefix):]
            head, sep, _ = rest.partition("_")
            if sep and head.isdigit():
                indexed += amount
            else:
                wildcard += amount
    return request.get(kind, 0) + (indexed or wildcard)


def gpu_amount(request: Mapping[str, int]) -> int:
    """GPU asked for by a request (see device_amount)."""
    return device_amount(request, "GPU")


class GpuIds:
    """Device ids are ints (indexes) or, when the node was started with CUDA_VISIBLE_DEVICES of
    device UUIDs, those strings; the node's order is the preference order."""

    def __init__(self, device_ids: list[int | str]) -> None:
        self.free = {i: _SCALE for i in device_ids}  # dicts keep the node's order

    def acquire(self, amount: int) -> list[int | str]:
        """Device ids for `amount` (fixed-point); empty when nothing is asked or none fit."""
        if amount <= 0 or not self.free:
            return []
        if amount >= _SCALE:
            whole = [i for i in self.free if self.free[i] == _SCALE][: amount // _SCALE]
            for i in whole:
                self.free[i] = 0
            return whole
        fitting = [i for i in self.free if self.free[i] >= amount]
        if not fitting:
            return []
        best = min(fitting, key=lambda i: self.free[i])
        self.free[best] -= amount
        return [best]

    def release(self, ids: list[int | str], amount: int) -> None:
        if not ids:
            return
        if amount >= _SCALE:
            for i in ids:
                self.free[i] = _SCALE
        else:
            self.free[ids[0]] = min(_SCALE, self.free[ids[0]] + amount)


def node_device_ids(total_gpu_fixed: int, visible: str | None) -> list[int | str]:
    """The node's device ids: its own CUDA_VISIBLE_DEVICES when that lists at least its GPU
    count, as ints where they are indexes and as given where they are not (`GPU-<uuid>`, as Ray
    hands them out: a task then sees CUDA_VISIBLE_DEVICES=<that uuid>); else 0..count-1."""
    count = total_gpu_fixed // _SCALE
    if visible:
        entries = [x.strip() for x in visible.split(",") if x.strip()]
        if len(entries) >= count:
            return [int(x) if x.isdigit() else x for x in entries[:count]]
    return list(range(count))


def other_device_pools(total: Mapping[str, int], env: Mapping[str, str]) -> dict[str, GpuIds]:
    """A pool of device ids for each other accelerator kind the node has (its own visible-devices
    variable, when set, names them)."""
    return {kind: GpuIds(node_device_ids(total[kind], env.get(var)))
            for kind, var in OTHER_DEVICE_ENV.items() if total.get(kind, 0) >= _SCALE}
