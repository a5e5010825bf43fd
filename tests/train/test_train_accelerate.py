"""Hugging Face Accelerate inside a TorchTrainer on 2 CPU workers (Ray's Accelerate guide):
``Accelerator()`` finds the rank, world size and process group the trainer set up."""

from __future__ import annotations

import os
import sys
import tempfile

import cloudpickle
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("accelerate")

from raylite import train  # noqa: E402
from raylite.train import Checkpoint, RunConfig, ScalingConfig  # noqa: E402
from raylite.train.torch import TorchTrainer  # noqa: E402

pytestmark = pytest.mark.usefixtures("cluster")
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def accelerate_loop(config):
    import torch.distributed as dist
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    context = train.get_context()
    torch.manual_seed(0)
    x = torch.randn(64, 3)
    y = x @ torch.tensor([[2.0], [-1.0], [0.5]])
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    batches = 0
    for _ in range(config["epochs"]):
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            accelerator.backward(loss)
            optimizer.step()
            batches += 1
    weights = accelerator.unwrap_model(model).weight.detach().flatten().tolist()
    seen = {
        "accelerate_rank": accelerator.process_index,
        "accelerate_world": accelerator.num_processes,
        "train_rank": context.get_world_rank(),
        "same_group": dist.is_initialized() and dist.get_world_size() == accelerator.num_processes,
        "distributed_type": str(accelerator.distributed_type),
        "batches": batches,
        "weights": weights,
        "loss": loss.item(),
    }
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = None
        if accelerator.is_main_process:
            accelerator.save(accelerator.unwrap_model(model).state_dict(), os.path.join(tmp, "model.pt"))
            checkpoint = Checkpoint.from_directory(tmp)
        with open(os.path.join(config["out"], f"rank{context.get_world_rank()}.txt"), "w") as f:
            f.write(repr(seen))
        train.report({"loss": seen["loss"]}, checkpoint=checkpoint)


def test_accelerator_joins_the_trainers_process_group(tmp_path):
    trainer = TorchTrainer(
        accelerate_loop,
        train_loop_config={"epochs": 10, "out": str(tmp_path)},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=str(tmp_path / "runs"), name="accelerate"),
    )
    result = trainer.fit()
    seen = [eval((tmp_path / f"rank{r}.txt").read_text()) for r in (0, 1)]
    for rank, s in enumerate(seen):
        assert (s["accelerate_rank"], s["accelerate_world"], s["train_rank"]) == (rank, 2, rank)
        assert s["same_group"] and "MULTI_CPU" in s["distributed_type"]
        # accelerate's prepared loader shards the 8 batches between the two ranks
        assert s["batches"] == 10 * 4
    # DDP kept the replicas identical, and the model learned the line
    assert seen[0]["weights"] == pytest.approx(seen[1]["weights"])
    assert seen[0]["weights"] == pytest.approx([2.0, -1.0, 0.5], abs=0.1)
    with result.checkpoint.as_directory() as d:
        state = torch.load(os.path.join(d, "model.pt"))
    assert state["weight"].flatten().tolist() == pytest.approx(seen[0]["weights"])
