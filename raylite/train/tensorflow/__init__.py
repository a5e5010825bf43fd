"""raylite.train.tensorflow: TensorflowTrainer, TF_CONFIG set-up and Keras reporting (Ray's names).

Importing it needs TensorFlow (``pip install tensorflow``, or ``tensorflow-cpu``), as
Ray's does.
"""

try:
    import tensorflow as _tf  # noqa: F401
except ModuleNotFoundError as e:
    raise ModuleNotFoundError(
        "TensorFlow isn't installed. To install TensorFlow, run 'pip install tensorflow' "
        "(or 'pip install tensorflow-cpu' on a machine without GPUs)."
    ) from e

from raylite.train.tensorflow.config import TensorflowConfig
from raylite.train.tensorflow.tensorflow_checkpoint import TensorflowCheckpoint
from raylite.train.tensorflow.tensorflow_trainer import TensorflowTrainer
from raylite.train.tensorflow.train_loop_utils import prepare_dataset_shard

__all__ = ["TensorflowCheckpoint", "TensorflowConfig", "TensorflowTrainer", "prepare_dataset_shard"]
