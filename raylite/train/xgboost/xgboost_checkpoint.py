"""XGBoostCheckpoint: a Checkpoint that holds one booster (``model.json``), as in Ray."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from raylite.train._internal.gbdt import load_preprocessor, save_preprocessor
from raylite.train.checkpoint import Checkpoint


class XGBoostCheckpoint(Checkpoint):
    """``XGBoostCheckpoint.from_model(booster)`` / ``.get_model()``."""

    MODEL_FILENAME = "model.json"

    @classmethod
    def from_model(
        cls, booster: Any, *, preprocessor: Any = None, path: str | os.PathLike[str] | None = None
    ) -> XGBoostCheckpoint:
        """Save ``booster`` into ``path`` (a new temporary directory by default)."""
        directory = os.fspath(path) if path is not None else tempfile.mkdtemp(prefix="xgb_ckpt_")
        os.makedirs(directory, exist_ok=True)
        booster.save_model(Path(directory, cls.MODEL_FILENAME).as_posix())
        checkpoint = cls.from_directory(directory)
        if preprocessor is not None:
            save_preprocessor(directory, preprocessor)
        return checkpoint  # type: ignore[return-value]  # from_directory builds cls

    def get_model(self) -> Any:
        """The booster saved by ``from_model``."""
        import xgboost

        with self.as_directory() as directory:
            booster = xgboost.Booster()
            booster.load_model(Path(directory, self.MODEL_FILENAME).as_posix())
            return booster

    def get_preprocessor(self) -> Any:
        """The preprocessor saved with the model, or None."""
        return load_preprocessor(self)
