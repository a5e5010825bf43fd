"""torch.distributed set-up for a worker group: rendezvous env, process group, DDP/FSDP wrap.

The controller picks rank 0's address and a free port on it as the rendezvous; each
worker exports the torchrun-style variables (so DeepSpeed, Lightning and Accelerate
find them too) and joins the process group before the user's loop starts. gloo on
CPU, NCCL on GPU; asking for NCCL without a usable GPU falls back to gloo with a
warning so a GPU script runs on a CPU machine by flipping ``use_gpu`` alone.
"""

from __future__ import annotations

import datetime
import os
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from raylite.train._internal.session import WorkerSpec


def resolve_backend(requested: str | None, use_gpu: bool, *, warn: bool = True) -> str:
    """gloo|nccl for this run; decided on the driver so every rank agrees."""
    if requested is None:
        return "nccl" if use_gpu else "gloo"
    backend = requested.lower()
    if backend == "nccl" and not use_gpu:
        if warn:
            warnings.warn(
                "TorchConfig(backend='nccl') with ScalingConfig(use_gpu=False): NCCL needs GPUs, "
                "so raylite uses gloo. Set use_gpu=True to train with NCCL.",
                stacklevel=3,
            )
        return "gloo"
    return backend


def rendezvous_env(spec: WorkerSpec, master_addr: str, master_port: int) -> dict[str, str]:
    rank = spec.rank
    return {
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "RANK": str(rank.world_rank),
        "WORLD_SIZE": str(rank.world_size),
        "LOCAL_RANK": str(rank.local_rank),
        "LOCAL_WORLD_SIZE": str(rank.local_world_size),
        "NODE_RANK": str(rank.node_rank),
        "GROUP_RANK": str(rank.node_rank),
        "ROLE_RANK": str(rank.world_rank),
        "ROLE_WORLD_SIZE": str(rank.world_size),
    }


def interface_env() -> dict[str, str]:
    """GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME for the interface holding this node's cluster IP
    (unless the user set them): gloo and NCCL otherwise resolve the host name, which in
    containers often fails or gives loopback, and the ranks on other hosts are refused."""
    from raylite.util._net import collective_env

    try:
        from raylite.util import get_node_ip_address

        ip = get_node_ip_address()
    except Exception:  # noqa: BLE001 - outside a cluster (unit tests): nothing to name
        return {}
    env = collective_env(ip)
    env.pop("VLLM_HOST_IP", None)  # vLLM's, not torch.distributed's
    return env


def device_for(use_gpu: bool) -> torch.device:
    """The device this worker trains on: its assigned GPU, else the CPU."""
    import torch

    if use_gpu and torch.cuda.is_available():
        try:
            import raylite

            gpu_ids = [str(g) for g in raylite.get_gpu_ids()]
        except Exception:  # noqa: BLE001 - not in a cluster: first visible GPU
            gpu_ids = []
        visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v]
        index = 0
        if gpu_ids and visible and gpu_ids[0] in visible:
            index = visible.index(gpu_ids[0])
        elif gpu_ids and not visible:
            index = int(float(gpu_ids[0]))
        return torch.device("cuda", index)
    return torch.device("cpu")


@dataclass
class TorchBackend:
    """Joins (and leaves) the process group around the user's loop on every rank."""

    backend: str
    master_addr: str
    master_port: int
    timeout_s: float = 1800.0
    init_method: str = "env"

    def prepare(self, spec: WorkerSpec) -> None:
        """Rank 0, before any rank starts: open the rendezvous store's server now. A rank
        whose client reaches the port before the server listens backs off for 0.5-1.5 s
        (c10d's retry), which was most of a warm fit()'s time to the first step; the
        worker group starts rank 0 (this) before the others, and rank 0's own rendezvous
        below reuses this server (multi_tenant)."""
        if spec.rank.world_rank != 0 or self.init_method != "env" or spec.rank.world_size < 2:
            return
        import torch.distributed as dist

        self._store = dist.TCPStore(  # kept alive (on this object) until the group is gone
            self.master_addr, self.master_port, spec.rank.world_size, True,
            timeout=datetime.timedelta(seconds=self.timeout_s), wait_for_workers=False,
            multi_tenant=True)

    def on_start(self, spec: WorkerSpec) -> None:
        import torch
        import torch.distributed as dist

        os.environ.update(rendezvous_env(spec, self.master_addr, self.master_port))
        os.environ.update(interface_env())
        if "OMP_NUM_THREADS" not in os.environ:
            # One intra-op thread per reserved CPU, as Ray and torchrun do: two workers
            # with a thread per core each would fight over the same cores.
            torch.set_num_threads(max(1, int(spec.trial_resources.get("CPU", 1))))
        if self.backend == "nccl":
            torch.cuda.set_device(device_for(True))
        if dist.is_initialized():
            return
        if self.init_method == "tcp":
            init = f"tcp://{self.master_addr}:{self.master_port}"
        else:
            init = "env://"
        dist.init_process_group(
            backend=self.backend,
            init_method=init,
            rank=spec.rank.world_rank,
            world_size=spec.rank.world_size,
            timeout=datetime.timedelta(seconds=self.timeout_s),
        )

    def on_shutdown(self) -> None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
        self.__dict__.pop("_store", None)  # rank 0's rendezvous server (prepare) closes with it


def wrap_model(
    model: torch.nn.Module,
    device: torch.device,
    parallel_strategy: str | None,
    parallel_strategy_kwargs: dict[str, Any] | None,
) -> torch.nn.Module:
    """DDP or FSDP around ``model`` when more than one rank trains; as-is otherwise."""
    import torch.distributed as dist

    kwargs = dict(parallel_strategy_kwargs or {})
    if parallel_strategy is None or not dist.is_initialized() or dist.get_world_size() < 2:
        return model
    if parallel_strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        if device.type == "cuda":
            kwargs.setdefault("device_ids", [device.index])
            kwargs.setdefault("output_device", device.index)
        return DistributedDataParallel(model, **kwargs)
    if parallel_strategy == "fsdp":
        if device.type == "cpu":
            # FSDP1 (FullyShardedDataParallel, what Ray uses) refuses to run without an
            # accelerator; FSDP2's fully_shard shards the same way over gloo on CPU.
            from torch.distributed.fsdp import fully_shard

            return fully_shard(model, **kwargs)  # type: ignore[return-value]  # an nn.Module subclass
        from torch.distributed.fsdp import FullyShardedDataParallel

        kwargs.setdefault("device_id", device)
        return FullyShardedDataParallel(model, **kwargs)
    raise ValueError(
        f"prepare_model(parallel_strategy={parallel_strategy!r}): use 'ddp', 'fsdp' or None."
    )
