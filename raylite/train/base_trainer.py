"""Ray's path for the training error: ``ray.train.base_trainer.TrainingFailedError``."""

from raylite.train.error import TrainingFailedError

__all__ = ["TrainingFailedError"]
