"""TensorflowCheckpoint: a Checkpoint holding one Keras model (``model.keras``), as in Ray."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from raylite.train.checkpoint import Checkpoint


class TensorflowCheckpoint(Checkpoint):
    """``TensorflowCheckpoint.from_model(model)`` / ``.get_model()``."""

    MODEL_FILENAME_KEY = "_model_filename"

    @classmethod
    def from_model(cls, model: Any, *, preprocessor: Any = None) -> TensorflowCheckpoint:
        """Save ``model`` (``model.save``) into a new temporary directory."""
        directory = tempfile.mkdtemp(prefix="tf_ckpt_")
        filename = "model.keras"
        model.save(Path(directory, filename).as_posix())
        checkpoint = cls.from_directory(directory)
        checkpoint.update_metadata({cls.MODEL_FILENAME_KEY: filename})
        return checkpoint  # type: ignore[return-value]  # from_directory builds cls

    def get_model(self) -> Any:
        """The Keras model saved by ``from_model``."""
        import tensorflow as tf

        filename = self.get_metadata().get(self.MODEL_FILENAME_KEY, "model.keras")
        with self.as_directory() as directory:
            return tf.keras.models.load_model(Path(directory, filename).as_posix())
