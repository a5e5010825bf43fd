"""The torch backend and loop helpers in two real processes (gloo), without a cluster."""

from __future__ import annotations

import socket

import pytest

torch = pytest.importorskip("torch")
import torch.multiprocessing as mp  # noqa: E402

from raylite.train._internal.messages import RankInfo  # noqa: E402
from raylite.train._internal.session import TrainSession, WorkerSpec, set_session  # noqa: E402
from raylite.train._internal.storage import StorageContext  # noqa: E402
from raylite.train._internal.torch_backend import TorchBackend, resolve_backend  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, port: int, storage_dir: str, out) -> None:
    import os

    import torch.distributed as dist

    import raylite.train.torch as rt
    from raylite import train

    spec = WorkerSpec(
        rank=RankInfo(rank, rank, 0, 2, 2),
        experiment_name="unit",
        storage=StorageContext.create(storage_dir, "unit"),
        backend=TorchBackend("gloo", "127.0.0.1", port, 60.0),
    )
    set_session(TrainSession(spec, lambda report: None))
    spec.backend.on_start(spec)
    env = {k: os.environ[k] for k in ("MASTER_ADDR", "RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK")}

    torch.manual_seed(rank)  # different initial weights: DDP must sync them from rank 0
    model = rt.prepare_model(torch.nn.Linear(3, 1))
    data = torch.utils.data.TensorDataset(torch.arange(20).float().unsqueeze(1).repeat(1, 3), torch.arange(20))
    loader = rt.prepare_data_loader(torch.utils.data.DataLoader(data, batch_size=4, shuffle=True))
    ordered = rt.prepare_data_loader(torch.utils.data.DataLoader(data, batch_size=4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    epochs = []
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        seen = []
        for x, idx in loader:
            seen += idx.tolist()
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        epochs.append(seen)
    plain = [i for _, idx in ordered for i in idx.tolist()]
    weights = [p.detach().tolist() for p in model.module.parameters()]  # plain data: no fd sharing
    out.put((rank, env, epochs, plain, weights, type(model).__name__, train.get_context().get_world_size(),
             str(rt.get_device())))
    spec.backend.on_shutdown()
    assert not dist.is_initialized()


@pytest.mark.slow
def test_ddp_and_distributed_sampler_in_two_processes(tmp_path):
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    port = _free_port()
    procs = [ctx.Process(target=_rank_main, args=(r, port, str(tmp_path), out)) for r in range(2)]
    for p in procs:
        p.start()
    results = {}
    for _ in procs:
        rank, *rest = out.get()
        results[rank] = rest
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    (env0, ep0, plain0, w0, kind, world, device), (env1, ep1, plain1, w1, *_rest) = results[0], results[1]
    assert env0 == {"MASTER_ADDR": "127.0.0.1", "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "NODE_RANK": "0"}
    assert env1["RANK"] == "1" and env1["LOCAL_RANK"] == "1"
    assert kind == "DistributedDataParallel" and world == 2 and device == "cpu"
    for epoch in range(2):  # disjoint halves that cover everything, every epoch
        assert not set(ep0[epoch]) & set(ep1[epoch])
        assert sorted(ep0[epoch] + ep1[epoch]) == list(range(20))
    assert ep0[0] != ep0[1]  # set_epoch reshuffles
    assert ep0[0] != sorted(ep0[0])  # the shuffle setting carried over
    assert plain0 == list(range(0, 20, 2)) and plain1 == list(range(1, 20, 2))  # unshuffled stays so
    for a, b in zip(w0, w1):
        assert a == b  # DDP kept the replicas identical


def test_backend_choice():
    assert resolve_backend(None, use_gpu=False) == "gloo"
    assert resolve_backend(None, use_gpu=True) == "nccl"
    with pytest.warns(UserWarning, match="uses gloo"):
        assert resolve_backend("nccl", use_gpu=False) == "gloo"


def test_helpers_outside_a_run_are_single_process():
    import raylite.train.torch as rt

    model = torch.nn.Linear(2, 2)
    assert rt.prepare_model(model) is model
    loader = torch.utils.data.DataLoader(list(range(4)))
    assert rt.prepare_data_loader(loader) is loader
    assert rt.get_device().type in ("cpu", "cuda")


def _prepared_rank(rank: int, port: int, storage_dir: str, ready, out) -> None:
    import torch.distributed as dist

    spec = WorkerSpec(
        rank=RankInfo(rank, rank, 0, 2, 2),
        experiment_name="unit",
        storage=StorageContext.create(storage_dir, "unit"),
        backend=TorchBackend("gloo", "127.0.0.1", port, 60.0),
    )
    if rank == 0:
        spec.backend.prepare(spec)
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # the rendezvous server listens before any rank joins the group
        ready.set()
    else:
        assert ready.wait(60)
    spec.backend.on_start(spec)
    value = torch.tensor([rank + 1.0])
    dist.all_reduce(value)
    out.put((rank, float(value.item())))
    spec.backend.on_shutdown()


def test_rank_zero_opens_the_rendezvous_store_before_the_group_starts(tmp_path):
    """prepare() (run by the worker group on rank 0 before it starts any other rank) binds
    the rendezvous server at once, so no rank's client reaches a port that is not listening
    yet and backs off (c10d's retry: 0.5-1.5 s before the first step); rank 0's own
    init_process_group then reuses that server."""
    ctx = mp.get_context("spawn")
    ready, out = ctx.Event(), ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_prepared_rank, args=(r, port, str(tmp_path), ready, out)) for r in (0, 1)]
    for p in procs:
        p.start()
    results = sorted(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(60)
    assert results == [(0, 3.0), (1, 3.0)]
    assert all(p.exitcode == 0 for p in procs)
