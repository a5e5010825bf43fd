"""The user's documents' "Distributed Training with Ray Train" recipe, on raylite.

Changed from the original: the imports, use_gpu=False, the placeholders the recipe
leaves to the reader (build_model, build_dataloader, validation) filled in with a small
classifier on synthetic data, fewer epochs, 2 workers, and a local storage_path instead
of s3://. `resources_per_worker={"GPU": 1, "CPU": 4}` is kept: the GPU entry is dropped
because use_gpu=False, and the auto-started local cluster is sized to fit 2 x 4 CPUs.

Shown: the training-function pattern, Checkpoint.from_dict, keeping the 3 best
checkpoints by val_loss, fault tolerance with max_failures=2 (a worker is killed once),
and TorchTrainer.restore of a run.
"""

import os
import tempfile

import torch

import raylite as ray
import raylite.train
from raylite.train import Checkpoint, CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from raylite.train.torch import TorchTrainer, get_device, prepare_data_loader, prepare_model

STORAGE = os.path.join(tempfile.gettempdir(), "ray_results")


def build_model(config):
    return torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def make_data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 20, generator=g)
    return torch.utils.data.TensorDataset(x, x[:, :4].argmax(dim=1))


def build_dataloader(config):
    return torch.utils.data.DataLoader(make_data(512, 0), batch_size=32, shuffle=True)


def train_func(config):
    model = build_model(config)
    model = model.to(get_device())
    model = prepare_model(model)
    train_loader = build_dataloader(config)
    train_loader = prepare_data_loader(train_loader)
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    for epoch in range(config["epochs"]):
        running_loss = 0.0
        for batch in train_loader:
            inputs, targets = batch
            inputs = inputs.to(get_device())
            targets = targets.to(get_device())
            optimizer.zero_grad()
            outputs = model(inputs)
            loss = torch.nn.functional.cross_entropy(outputs, targets)
            loss.backward()
            optimizer.step()
            running_loss += loss.item()
        ray.train.report({"loss": running_loss / len(train_loader), "epoch": epoch})


scaling_config = ScalingConfig(
    num_workers=2,
    use_gpu=False,
    resources_per_worker={"GPU": 1, "CPU": 4},
)
trainer = TorchTrainer(
    train_loop_per_worker=train_func,
    train_loop_config={"lr": 1e-2, "epochs": 3},
    scaling_config=scaling_config,
)
result = trainer.fit()
print(f"Recipe loss per epoch: {list(result.metrics_dataframe['loss'].round(3))}")


# Checkpoint saving and restoring (Checkpoint.from_dict), fault tolerance, restore.
def train_func_with_checkpoints(config):
    model = prepare_model(build_model(config))
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    start = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint:
        state = checkpoint.to_dict()
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"] + 1
    loader = prepare_data_loader(build_dataloader(config))
    val_x, val_y = make_data(256, 1).tensors
    for epoch in range(start, config["epochs"]):
        if epoch == config["kill_at"] and ray.train.get_context().get_world_rank() == 1:
            marker = config["marker"]
            if not os.path.exists(marker):  # a preempted machine, once
                open(marker, "w").close()
                os._exit(1)
        loader.sampler.set_epoch(epoch)
        for inputs, targets in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(inputs), targets).backward()
            optimizer.step()
        with torch.no_grad():
            val_loss = torch.nn.functional.cross_entropy(model(val_x), val_y).item()
        ray.train.report(
            {"val_loss": val_loss, "epoch": epoch},
            checkpoint=Checkpoint.from_dict({
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "epoch": epoch,
            }),
        )


run_config = RunConfig(
    storage_path=STORAGE,
    name="recipe_experiment",
    checkpoint_config=CheckpointConfig(
        num_to_keep=3,
        checkpoint_score_attribute="val_loss",
        checkpoint_score_order="min",
    ),
    failure_config=FailureConfig(max_failures=2),
)
marker = os.path.join(tempfile.mkdtemp(), "preempted")
trainer = TorchTrainer(
    train_loop_per_worker=train_func_with_checkpoints,
    train_loop_config={"lr": 1e-2, "epochs": 5, "kill_at": 3, "marker": marker},
    scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
    run_config=run_config,
)
result = trainer.fit()
print(f"Survived a worker loss: {os.path.exists(marker)}; epochs seen: {list(result.metrics_dataframe['epoch'])}")
print(f"Kept checkpoints (best first): {[round(m['val_loss'], 3) for _, m in result.best_checkpoints]}")

# To restore a previous run (the original points at s3://bucket/checkpoints/experiment/):
experiment = os.path.join(STORAGE, "recipe_experiment")
trainer = TorchTrainer.restore(experiment, train_loop_config={"lr": 1e-2, "epochs": 7, "kill_at": -1, "marker": marker})
result = trainer.fit()
print(f"Restored run continued to epoch {result.metrics['epoch']}; checkpoint {result.checkpoint}")
