"""The user's documents' first Train sample ("The Quick Version"), run on raylite.

Changed from the original: the imports (ray -> raylite) and use_gpu=False. With no
cluster running, fit() starts a local one sized for the 4 workers.
"""

import raylite as ray
from raylite.train import ScalingConfig
from raylite.train.torch import TorchTrainer


def train_func():
    import torch

    import raylite.train.torch  # noqa: F401 - the original: import ray.train.torch

    model = torch.nn.Linear(10, 1)
    model = ray.train.torch.prepare_model(model)

    for epoch in range(5):
        loss = torch.tensor(1.0)  # your real training step here
        ray.train.report({"loss": loss.item(), "epoch": epoch})


trainer = TorchTrainer(
    train_func,
    scaling_config=ScalingConfig(num_workers=4, use_gpu=False),
)
result = trainer.fit()
print(f"Final loss: {result.metrics['loss']}")
