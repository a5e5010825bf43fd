"""LightGBMCheckpoint: a Checkpoint that holds one booster (``model.txt``), as in Ray."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from raylite.train._internal.gbdt import load_preprocessor, save_preprocessor
from raylite.train.checkpoint import Checkpoint


class LightGBMCheckpoint(Checkpoint):
    """``LightGBMCheckpoint.from_model(booster)`` / ``.get_model()``."""

    MODEL_FILENAME = "model.txt"

    @classmethod
    def from_model(
        cls, booster: Any, *, preprocessor: Any = None, path: str | os.PathLike[str] | None = None
    ) -> LightGBMCheckpoint:
        """Save ``booster`` into ``path`` (a new temporary directory by default)."""
        directory = os.fspath(path) if path is not None else tempfile.mkdtemp(prefix="lgbm_ckpt_")
        os.makedirs(directory, exist_ok=True)
        booster.save_model(Path(directory, cls.MODEL_FILENAME).as_posix())
        if preprocessor is not None:
            save_preprocessor(directory, preprocessor)
        return cls.from_directory(directory)  # type: ignore[return-value]  # builds cls

    def get_model(self) -> Any:
        """The booster saved by ``from_model``."""
        import lightgbm

        with self.as_directory() as directory:
            return lightgbm.Booster(model_file=Path(directory, self.MODEL_FILENAME).as_posix())

    def get_preprocessor(self) -> Any:
        """The preprocessor saved with the model, or None."""
        return load_preprocessor(self)
