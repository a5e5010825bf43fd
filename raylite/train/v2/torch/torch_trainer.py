"""``ray.train.v2.torch.torch_trainer``'s path: the same ``TorchTrainer`` as ``raylite.train.torch``."""

from raylite.train.torch import TorchTrainer

__all__ = ["TorchTrainer"]
