"""raylite.train.torch: TorchTrainer and the helpers used inside its training loop."""

from raylite.train.torch.config import TorchConfig
from raylite.train.torch.torch_trainer import TorchTrainer
from raylite.train.torch.train_loop_utils import (
    backward,
    enable_reproducibility,
    get_device,
    get_devices,
    prepare_data_loader,
    prepare_model,
    prepare_optimizer,
)

__all__ = [
    "TorchConfig",
    "TorchTrainer",
    "backward",
    "enable_reproducibility",
    "get_device",
    "get_devices",
    "prepare_data_loader",
    "prepare_model",
    "prepare_optimizer",
]
