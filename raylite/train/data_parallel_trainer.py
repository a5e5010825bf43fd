"""DataParallelTrainer: run one loop on N workers; TorchTrainer adds torch.distributed.

``fit()`` checks the storage and the cluster before any worker starts, saves the
trainer for ``restore()``, then hands the run to the TrainController.
"""

from __future__ import annotations

import copy
import datetime
import math
import os
import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import cloudpickle

from raylite.train._internal.callbacks import (
    CallbackDispatcher,
    TrainRunContext,
    TrialView,
    validate_callbacks,
)
from raylite.train._internal.controller import RunSpec, TrainController
from raylite.train._internal.env import checkpoint_upload_mode
from raylite.train._internal.messages import WorkerMetadata
from raylite.train._internal.policies import infeasible_message
from raylite.train._internal.progress import ProgressReporter, epochs_total
from raylite.train._internal.state import RunState
from raylite.train._internal.storage import (
    STATE_FILE,
    TRAINER_FILE,
    StorageContext,
    split_run_path,
)
from raylite.train.checkpoint import Checkpoint
from raylite.train.config import BackendConfig, DataConfig, RunConfig, ScalingConfig
from raylite.train.error import TrainingResourcesError
from raylite.train.result import Result


class DataParallelTrainer:
    """Runs ``train_loop_per_worker`` on ``scaling_config.num_workers`` workers."""

    _trainer_name = "DataParallelTrainer"

    def __init__(
        self,
        train_loop_per_worker: Callable[..., Any],
        *,
        train_loop_config: dict[str, Any] | None = None,
        backend_config: BackendConfig | None = None,
        scaling_config: ScalingConfig | None = None,
        run_config: RunConfig | None = None,
        datasets: dict[str, Any] | None = None,
        dataset_config: DataConfig | None = None,
        resume_from_checkpoint: Checkpoint | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        if not callable(train_loop_per_worker):
            raise TypeError(
                f"{type(self).__name__}(train_loop_per_worker=...) needs a function, got "
                f"{type(train_loop_per_worker).__name__}."
            )
        for arg, value, cls in (
            ("scaling_config", scaling_config, ScalingConfig),
            ("run_config", run_config, RunConfig),
            ("dataset_config", dataset_config, DataConfig),
            ("resume_from_checkpoint", resume_from_checkpoint, Checkpoint),
        ):
            if value is not None and not isinstance(value, cls):
                raise TypeError(
                    f"{type(self).__name__}({arg}=...) needs a {cls.__name__}, got "
                    f"{type(value).__name__}."
                )
        if train_loop_config is not None and not isinstance(train_loop_config, dict):
            raise TypeError("train_loop_config must be a dict (or None).")
        self.train_loop_per_worker = train_loop_per_worker
        self.train_loop_config = train_loop_config
        self.backend_config = backend_config or BackendConfig()
        self.scaling_config = scaling_config or ScalingConfig(num_workers=1)
        self.run_config = run_config or RunConfig()
        self.datasets = dict(datasets or {})
        self.dataset_config = dataset_config or DataConfig()
        self.resume_from_checkpoint = resume_from_checkpoint
        self.metadata = dict(metadata or {})
        self._restored_state: RunState | None = None
        self._missing_datasets: list[str] = []

    # -- hooks for subclasses -------------------------------------------------------
    def _backend_factory(self) -> Callable[[WorkerMetadata], Any] | None:
        """The per-rank backend (process-group set-up); the plain trainer has none."""
        return None

    # -- fit ------------------------------------------------------------------------
    def fit(self) -> Result:
        """Train to the end and return the Result; raise TrainingFailedError on failure."""
        if self._missing_datasets:
            raise ValueError(
                f"This run was restored without its datasets {self._missing_datasets}, which "
                f"could not be saved with it: pass them again, "
                f"{type(self).__name__}.restore(path, datasets={{...}})."
            )
        scaling, run_config = self.scaling_config, self.run_config
        name = run_config.name or self._default_name()
        storage = StorageContext.create(run_config.storage_path, name, run_config.storage_filesystem)
        storage.validate_writable()
        if self._restored_state is None and storage.exists(STATE_FILE):
            warnings.warn(
                f"{storage.experiment_path} already holds a run; starting a new one there. "
                f"To continue the old one use {type(self).__name__}.restore(path).",
                stacklevel=2,
            )
        ship_checkpoints = checkpoint_upload_mode()  # a bad value fails before any worker starts
        callbacks = validate_callbacks(run_config.callbacks)
        self._warn_ignored_checkpoint_options(run_config)
        driver_node = self._ensure_cluster(scaling)
        self._check_feasible(scaling)
        storage.write_bytes(TRAINER_FILE, self._pickle_for_restore(storage))
        reporter = ProgressReporter(self._trainer_name, run_config.verbose,
                                    epochs=epochs_total(self.train_loop_config))
        spec = RunSpec(
            trainer_name=self._trainer_name,
            train_fn=self.train_loop_per_worker,
            train_loop_config=self.train_loop_config,
            num_workers=scaling._num_workers,
            storage=storage,
            checkpoint_config=run_config.checkpoint_config,  # type: ignore[arg-type]
            failure_config=run_config.failure_config,  # type: ignore[arg-type]
            verbose=run_config.verbose,
            metadata=self.metadata,
            use_gpu=scaling.use_gpu,
            datasets=self.datasets,
            dataset_config=self.dataset_config,
            backend_factory=self._backend_factory(),
            resume_from_checkpoint=self.resume_from_checkpoint,
            trial_resources=scaling._resources_per_worker_not_none,
            driver_node_id=driver_node,
            ship_checkpoints=ship_checkpoints,
            callbacks=self._bind_callbacks(callbacks, storage) if callbacks else None,
        )
        controller = TrainController(
            spec, lambda: self._make_group(reporter), prior=self._restored_state, reporter=reporter
        )
        result = controller.run()
        if controller.error is not None:
            raise controller.error
        return result

    def _bind_callbacks(self, callbacks: list[Any], storage: StorageContext) -> CallbackDispatcher:
        context = TrainRunContext(
            run_config=self.run_config,
            train_loop_config=self.train_loop_config,
            scaling_config=self.scaling_config,
            datasets=dict(self.datasets),
        )
        trial = TrialView(storage.experiment_name, self.train_loop_config, storage.experiment_path)
        return CallbackDispatcher(callbacks, context, trial)

    def _warn_ignored_checkpoint_options(self, run_config: RunConfig) -> None:
        """checkpoint_frequency / checkpoint_at_end drive class trainers in Ray; with a loop
        function the loop decides when to checkpoint, so raylite (like Ray) does not use them."""
        cc = run_config.checkpoint_config
        if cc is None:
            return
        set_options = [
            f"{name}={value!r}"
            for name, value in (("checkpoint_frequency", cc.checkpoint_frequency),
                                ("checkpoint_at_end", cc.checkpoint_at_end))
            if value
        ]
        if set_options:
            warnings.warn(
                f"CheckpointConfig({', '.join(set_options)}) has no effect on {self._trainer_name}: "
                "the training loop decides when to checkpoint, by passing checkpoint= to "
                "train.report() (e.g. every N epochs). num_to_keep and the score options apply.",
                stacklevel=3,
            )

    def _make_group(self, reporter: ProgressReporter) -> Any:
        from raylite.train._internal.worker_group import ActorWorkerGroup

        scaling = self.scaling_config
        return ActorWorkerGroup(
            scaling._num_workers,
            scaling._resources_per_worker_not_none,
            scaling.placement_strategy,
            reporter,
        )

    def _default_name(self) -> str:
        stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        return f"{self._trainer_name}_{stamp}"

    def _ensure_cluster(self, scaling: ScalingConfig) -> str:
        """Start a local cluster if none is running (sized to fit the request); return
        the driver's node id."""
        import raylite

        if not raylite.is_initialized():
            need = scaling.num_cpus_per_worker * scaling._num_workers
            cpus = os.cpu_count() or 1
            kwargs: dict[str, Any] = {}
            if need > cpus:
                # A laptop run of a script written for a big cluster: oversubscribe the
                # CPUs rather than refuse (an explicit raylite.init() is taken as meant).
                kwargs["num_cpus"] = int(math.ceil(need))
            raylite.init(**kwargs)
        try:
            return str(raylite.get_runtime_context().get_node_id())
        except Exception:  # noqa: BLE001 - no node id: treat every worker as remote-safe
            return "local"

    def _check_feasible(self, scaling: ScalingConfig) -> None:
        import raylite

        nodes = [
            {k: float(v) for k, v in (n.get("Resources") or {}).items()}
            for n in raylite.nodes()
            if n.get("Alive", True)
        ]
        message = infeasible_message(
            self._trainer_name,
            scaling._num_workers,
            scaling._resources_per_worker_not_none,
            scaling.placement_strategy,
            nodes,
        )
        if message:
            raise TrainingResourcesError(message)

    # -- restore --------------------------------------------------------------------
    def _pickle_for_restore(self, storage: StorageContext) -> bytes:
        clone = copy.copy(self)
        clone._restored_state = None
        if self.run_config.callbacks:
            try:
                cloudpickle.dumps(self.run_config.callbacks)
            except Exception as e:  # noqa: BLE001 - callbacks often hold clients or files
                clone.run_config = replace(self.run_config, callbacks=None)
                warnings.warn(
                    f"RunConfig(callbacks=...) cannot be saved for restore() ({type(e).__name__}: "
                    f"{e}); the run goes on with them, but a restored run has none unless you pass "
                    "run_config= to restore().",
                    stacklevel=4,
                )
        try:
            cloudpickle.dumps(self.datasets)
            clone._missing_datasets = []
        except Exception:  # noqa: BLE001 - datasets that cannot be pickled are re-passed
            clone.datasets = {}
            clone._missing_datasets = sorted(self.datasets)
        try:
            return cloudpickle.dumps(clone)
        except Exception as e:  # noqa: BLE001 - name the culprit before any worker starts
            raise TypeError(
                f"{type(self).__name__} cannot send train_loop_per_worker or train_loop_config "
                f"to its workers: {type(e).__name__}: {e}. Everything the loop refers to must be "
                "picklable; create locks, clients and open files inside the loop instead."
            ) from e

    @classmethod
    def can_restore(cls, path: str | os.PathLike[str]) -> bool:
        """Whether ``path`` (storage_path/name of an earlier run) holds a restorable run."""
        storage_path, name = split_run_path(os.fspath(path))
        try:
            return StorageContext.create(storage_path, name).exists(TRAINER_FILE)
        except Exception:  # noqa: BLE001 - unreadable means no
            return False

    @classmethod
    def restore(
        cls,
        path: str | os.PathLike[str],
        train_loop_per_worker: Callable[..., Any] | None = None,
        train_loop_config: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> DataParallelTrainer:
        """A trainer that continues the run in ``path`` from its latest kept checkpoint.

        Keyword arguments (``datasets``, ``scaling_config``, ...) replace the saved ones.
        """
        storage_path, name = split_run_path(os.fspath(path))
        storage = StorageContext.create(storage_path, name)
        if not storage.exists(TRAINER_FILE):
            raise ValueError(
                f"Cannot restore from {os.fspath(path)!r}: no {TRAINER_FILE} there. Pass the "
                "directory of an earlier run (storage_path/name, as printed by fit())."
            )
        trainer = cloudpickle.loads(storage.read_bytes(TRAINER_FILE))
        if not isinstance(trainer, cls):
            raise ValueError(
                f"{os.fspath(path)!r} holds a {type(trainer).__name__} run, not a {cls.__name__} one."
            )
        if train_loop_per_worker is not None:
            trainer.train_loop_per_worker = train_loop_per_worker
        if train_loop_config is not None:
            trainer.train_loop_config = train_loop_config
        datasets = kwargs.pop("datasets", None)
        if datasets is not None:
            trainer.datasets = dict(datasets)
            trainer._missing_datasets = []
        for key, value in kwargs.items():
            if not hasattr(trainer, key):
                raise TypeError(f"{cls.__name__}.restore() got an unexpected argument {key!r}.")
            setattr(trainer, key, value)
        trainer.run_config = replace(trainer.run_config, storage_path=storage_path, name=name)
        if storage.exists(STATE_FILE):
            trainer._restored_state = RunState.from_json(storage.read_bytes(STATE_FILE))
        return trainer
