"""Train's environment overrides, read in this one place (STYLE: configuration read once).

``RAYLITE_TRAIN_CHECKPOINT_UPLOAD`` chooses how a worker's checkpoint files reach
``storage_path``:

- ``auto`` (default): a worker writes straight to storage, unless storage is a local
  path and the worker runs on another node than the driver; then the files travel
  through raylite (packed bytes in the object store) and the driver writes them.
  This is why the "checkpointing fails on multi-node" error cannot happen here.
- ``driver``: always send the files through the driver (what a worker node without
  the head's filesystem needs; also lets tests exercise that path on one machine).
- ``direct``: always write from the worker (storage is shared, e.g. an NFS mount
  every node sees under the same path, and checkpoints are too big to copy twice).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

CHECKPOINT_UPLOAD_ENV = "RAYLITE_TRAIN_CHECKPOINT_UPLOAD"
_UPLOAD_MODES: dict[str, bool | str] = {"auto": "auto", "driver": True, "direct": False}


def checkpoint_upload_mode(env: Mapping[str, str] = os.environ) -> bool | str:
    """``"auto"``, True (through the driver) or False (direct), from the environment."""
    raw = env.get(CHECKPOINT_UPLOAD_ENV, "auto").strip().lower() or "auto"
    if raw not in _UPLOAD_MODES:
        raise ValueError(
            f"{CHECKPOINT_UPLOAD_ENV}={raw!r} is not understood: use one of "
            f"{', '.join(_UPLOAD_MODES)} (see raylite.train._internal.env)."
        )
    return _UPLOAD_MODES[raw]
