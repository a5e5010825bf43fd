"""raylite.train.huggingface: Hugging Face integrations (``transformers``)."""

import importlib
from typing import Any

__all__ = ["transformers"]


def __getattr__(name: str) -> Any:
    if name == "transformers":
        return importlib.import_module(f"{__name__}.transformers")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
