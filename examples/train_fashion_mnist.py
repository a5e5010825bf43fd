"""The user's documents' ResNet-on-FashionMNIST sample, adapted to run without downloads.

Changed from the original: the imports, use_gpu=False, and the data and model: there is
no torchvision here, so a synthetic FashionMNIST-shaped dataset (1x28x28 images, 10
classes) and a small CNN with the same `model.conv1` swap stand in for them; fewer
epochs and workers so it finishes in seconds on a laptop. The training loop itself,
prepare_model/prepare_data_loader, set_epoch and per-epoch checkpoints are as written.
"""

import os
import tempfile

import torch
from torch.nn import CrossEntropyLoss
from torch.optim import Adam
from torch.utils.data import DataLoader, TensorDataset

import raylite as ray  # the original: import ray.train / import ray.train.torch
import raylite.train.torch  # noqa: F401
from raylite.train import RunConfig, ScalingConfig
from raylite.train.torch import TorchTrainer


def small_cnn(num_classes=10):
    """Stands in for torchvision's resnet18(num_classes=10)."""
    model = torch.nn.Sequential()
    model.conv1 = torch.nn.Conv2d(3, 8, kernel_size=3, padding=1)
    model.relu = torch.nn.ReLU()
    model.pool = torch.nn.AdaptiveAvgPool2d(4)
    model.flatten = torch.nn.Flatten()
    model.fc = torch.nn.Linear(8 * 16, num_classes)
    return model


def synthetic_fashion_mnist(n=1024, seed=0):
    """Images whose class decides which quadrant is bright: learnable in a few epochs."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=g)
    images = torch.randn(n, 1, 28, 28, generator=g) * 0.3
    for i, label in enumerate(labels.tolist()):
        r, c = divmod(label, 4)
        images[i, 0, r * 7 : r * 7 + 7, c * 7 : c * 7 + 7] += 2.0
    return TensorDataset((images - 0.2860) / 0.3203, labels)


def train_func():
    model = small_cnn(num_classes=10)
    model.conv1 = torch.nn.Conv2d(1, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False)
    # prepare_model wraps in DDP and places on correct device
    model = ray.train.torch.prepare_model(model)

    criterion = CrossEntropyLoss()
    optimizer = Adam(model.parameters(), lr=0.01)

    train_data = synthetic_fashion_mnist()
    train_loader = DataLoader(train_data, batch_size=128, shuffle=True)
    # prepare_data_loader adds DistributedSampler and handles device placement
    train_loader = ray.train.torch.prepare_data_loader(train_loader)

    for epoch in range(3):
        if ray.train.get_context().get_world_size() > 1:
            train_loader.sampler.set_epoch(epoch)

        for images, labels in train_loader:
            outputs = model(images)
            loss = criterion(outputs, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        metrics = {"loss": loss.item(), "epoch": epoch}
        with tempfile.TemporaryDirectory() as tmpdir:
            torch.save(model.module.state_dict(), os.path.join(tmpdir, "model.pt"))
            ray.train.report(
                metrics,
                checkpoint=ray.train.Checkpoint.from_directory(tmpdir),
            )


scaling_config = ScalingConfig(num_workers=2, use_gpu=False)
run_config = RunConfig(
    storage_path=os.path.join(tempfile.gettempdir(), "ray_results"), name="fashion_mnist_run"
)

trainer = TorchTrainer(
    train_func,
    scaling_config=scaling_config,
    run_config=run_config,
)
result = trainer.fit()
print(result.metrics_dataframe[["epoch", "loss"]])
print(f"Checkpoint: {result.checkpoint}")
