"""DataContext: the knobs a user turns for Data execution (Ray's names).

One context per process (``DataContext.get_current()``). The driver's context
is copied into every execution when it starts, and shipped with a dataset to
other processes (``streaming_split`` coordinators), so settings made before
running a pipeline apply wherever it runs.
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, field
from typing import Any, ClassVar

DEFAULT_TARGET_MAX_BLOCK_SIZE = 128 * 1024 * 1024
DEFAULT_TARGET_MIN_BLOCK_SIZE = 1 * 1024 * 1024
DEFAULT_BATCH_SIZE = 1024


@dataclass
class ExecutionResources:
    """Resource limits for one execution; None means "derive from the cluster"."""

    cpu: float | None = None
    gpu: float | None = None
    object_store_memory: float | None = None

    def copy(self) -> ExecutionResources:
        return ExecutionResources(self.cpu, self.gpu, self.object_store_memory)


@dataclass
class ExecutionOptions:
    """Per-execution options (Ray: ``DataContext.execution_options``).

    ``resource_limits.object_store_memory`` is the byte budget that bounds how
    much block data an execution holds at once (queued, in flight, and waiting
    for the consumer); producers pause when it is reached.
    """

    resource_limits: ExecutionResources = field(default_factory=ExecutionResources)
    exclude_resources: ExecutionResources = field(default_factory=ExecutionResources)
    preserve_order: bool = False
    locality_with_output: bool = False
    verbose_progress: bool = False
    actor_locality_enabled: bool = True


@dataclass
class DataContext:
    """Process-wide Data settings, read when an execution starts.

    Fields a user touches: ``enable_progress_bars``, ``target_max_block_size``,
    ``execution_options.resource_limits.object_store_memory`` (the memory
    budget), ``execution_options.preserve_order``.
    """

    target_max_block_size: int = DEFAULT_TARGET_MAX_BLOCK_SIZE
    target_min_block_size: int = DEFAULT_TARGET_MIN_BLOCK_SIZE
    target_shuffle_max_block_size: int = DEFAULT_TARGET_MAX_BLOCK_SIZE
    read_op_min_num_blocks: int = 200
    enable_progress_bars: bool = True
    enable_operator_progress_bars: bool = True
    use_push_based_shuffle: bool = False
    execution_options: ExecutionOptions = field(default_factory=ExecutionOptions)
    # fraction of the object store used as the default memory budget
    object_store_memory_fraction: float = 0.25
    # accepted for Ray compatibility; raylite always stores n-d arrays as tensor columns
    enable_tensor_extension_casting: bool = True

    _current: ClassVar[DataContext | None] = None
    _lock: ClassVar[threading.Lock] = threading.Lock()

    @staticmethod
    def get_current() -> DataContext:
        """This process's context (created with defaults on first use)."""
        with DataContext._lock:
            if DataContext._current is None:
                DataContext._current = DataContext()
            return DataContext._current

    @staticmethod
    def _set_current(ctx: DataContext) -> None:
        with DataContext._lock:
            DataContext._current = ctx

    def copy(self) -> DataContext:
        return copy.deepcopy(self)

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
