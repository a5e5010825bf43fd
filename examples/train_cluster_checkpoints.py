"""The user's documents' "Ray Cluster for distributed AI training" walkthrough, on raylite.

Changed from the original: the imports, use_gpu=False, `ray.init()` starts a local
cluster instead of joining one (`address="auto"` needs `raylite start --head` first),
2 workers instead of 4 so it is quick on a laptop, and the checkpointing loop's
"... training loop ..." placeholder is filled in so its loss and epoch are real.
"""

import os
import tempfile

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import raylite as ray
from raylite import train
from raylite.train import Checkpoint, RunConfig, ScalingConfig
from raylite.train.torch import TorchTrainer


# Step 2: a trainable function
def train_loop_per_worker(config):
    # Ray handles process group init — no manual dist.init_process_group needed
    model = nn.Linear(config["input_size"], config["output_size"])

    # Wrap model for distributed training across workers
    model = train.torch.prepare_model(model)

    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    loss_fn = nn.MSELoss()

    # Prepare your DataLoader — Ray shards data across workers automatically
    X = torch.randn(1000, config["input_size"])
    y = torch.randn(1000, config["output_size"])
    dataset = TensorDataset(X, y)
    loader = DataLoader(dataset, batch_size=config["batch_size"])
    loader = train.torch.prepare_data_loader(loader)  # Distributes batches

    for epoch in range(config["epochs"]):
        total_loss = 0
        for batch_X, batch_y in loader:
            optimizer.zero_grad()
            pred = model(batch_X)
            loss = loss_fn(pred, batch_y)
            loss.backward()
            optimizer.step()
            total_loss += loss.item()

        # Report metrics back to Ray — visible in dashboard
        train.report({"loss": total_loss / len(loader), "epoch": epoch})


# Step 3: launch the distributed job
ray.init()  # the original: ray.init(address="auto") to join a running cluster

config = {"input_size": 128, "output_size": 10, "lr": 1e-3, "batch_size": 64, "epochs": 3}
trainer = TorchTrainer(
    train_loop_per_worker=train_loop_per_worker,
    train_loop_config=config,
    scaling_config=ScalingConfig(
        num_workers=2,  # One per GPU across your cluster
        use_gpu=False,  # False if CPU-only nodes
        resources_per_worker={"GPU": 1},  # dropped (with a warning) because use_gpu=False
    ),
)

result = trainer.fit()
print(f"Final loss: {result.metrics['loss']:.4f}")


# Step 4: save and load checkpoints
def train_loop_with_checkpoints(config):
    model = nn.Linear(config["input_size"], config["output_size"])
    model = train.torch.prepare_model(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    loss_fn = nn.MSELoss()
    X = torch.randn(512, config["input_size"])
    y = X[:, : config["output_size"]] * 2.0

    # Resume from checkpoint if one exists
    checkpoint = train.get_checkpoint()
    start_epoch = 0
    if checkpoint:
        with checkpoint.as_directory() as ckpt_dir:
            state = torch.load(os.path.join(ckpt_dir, "checkpoint.pt"))
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            start_epoch = state["epoch"] + 1

    for epoch in range(start_epoch, config["epochs"]):
        # ... training loop ...
        optimizer.zero_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        optimizer.step()

        # Save checkpoint every epoch — only worker 0 saves to avoid conflicts
        if train.get_context().get_world_rank() == 0:
            with tempfile.TemporaryDirectory() as tmpdir:
                torch.save(
                    {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
                    os.path.join(tmpdir, "checkpoint.pt"),
                )
                train.report(
                    {"loss": loss.item(), "epoch": epoch}, checkpoint=Checkpoint.from_directory(tmpdir)
                )


trainer = TorchTrainer(
    train_loop_per_worker=train_loop_with_checkpoints,
    train_loop_config={**config, "lr": 1e-2, "epochs": 5},
    scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
    run_config=RunConfig(storage_path=os.path.join(tempfile.gettempdir(), "ray_results")),
)
result = trainer.fit()

# Verification
best_checkpoint = result.best_checkpoints[0][0]
print(f"Best checkpoint path: {best_checkpoint}")
print(f"Metrics: {result.metrics_dataframe[['epoch','loss']].tail()}")
