"""TorchConfig: how the workers' torch.distributed process group is set up."""

from __future__ import annotations

from dataclasses import dataclass

from raylite.train.config import BackendConfig


@dataclass
class TorchConfig(BackendConfig):
    """``backend``: "gloo" | "nccl" | None (nccl with use_gpu, gloo without).
    ``init_method``: "env" (MASTER_ADDR/PORT) or "tcp". ``timeout_s``: collective timeout."""

    backend: str | None = None
    init_method: str = "env"
    timeout_s: int = 1800

    def __post_init__(self) -> None:
        if self.init_method not in ("env", "tcp"):
            raise ValueError(f"TorchConfig(init_method={self.init_method!r}): use 'env' or 'tcp'.")

    @property
    def backend_name(self) -> str | None:
        return self.backend
