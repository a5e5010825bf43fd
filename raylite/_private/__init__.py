"""Names from Ray's private modules that Ray's documentation examples and libraries built on Ray
import (`ray._private.worker`, `.services`, `.state`, `.ray_constants`, `.test_utils`,
`.client_mode_hook`): see compat_names.py, the one module that defines the library-facing ones.

Its submodules load on first attribute access (PEP 562), as code written for Ray reads
`ray._private.worker.global_worker` after a bare `import ray`."""

from __future__ import annotations

import importlib
from typing import Any

_SUBMODULES = {"client_mode_hook", "compat_names", "ray_constants", "services", "state", "test_utils", "worker"}


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
