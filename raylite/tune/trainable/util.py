"""`tune.with_parameters` and `tune.with_resources`: wrap a trainable with large constant
arguments (put in the object store once, not pickled into every trial) or with its resources."""

from __future__ import annotations

import functools
import inspect
from typing import Any

from raylite.tune.execution.placement_groups import resource_dict_to_pg_factory
from raylite.tune.trainable.trainable import Trainable


def _name(trainable: Any) -> str:
    return getattr(trainable, "__name__", type(trainable).__name__)


def with_parameters(trainable: Any, **kwargs: Any) -> Any:
    """`trainable(config, **kwargs)` in each trial; the kwargs travel by object reference."""
    import raylite

    if not (callable(trainable) or (inspect.isclass(trainable)
                                    and issubclass(trainable, Trainable))):
        raise TypeError(f"tune.with_parameters() needs a function or a Trainable class, got "
                        f"{type(trainable).__name__}.")
    if not raylite.is_initialized():
        raylite.init()
    refs = {key: raylite.put(value) for key, value in kwargs.items()}

    if inspect.isclass(trainable) and issubclass(trainable, Trainable):
        class _WithParameters(trainable):  # type: ignore[valid-type, misc]
            def setup(self, config: dict) -> None:
                values = {k: raylite.get(r) for k, r in refs.items()}
                trainable.setup(self, config, **values)

        _WithParameters.__name__ = trainable.__name__
        _WithParameters._tune_resources = getattr(trainable, "_tune_resources", None)
        return _WithParameters

    @functools.wraps(trainable)
    def inner(config: dict) -> Any:
        values = {k: raylite.get(r) for k, r in refs.items()}
        return trainable(config, **values)

    inner._tune_resources = getattr(trainable, "_tune_resources", None)  # type: ignore[attr-defined]
    return inner


def with_resources(trainable: Any, resources: Any) -> Any:
    """The trainable with each trial's resources: a dict ({"cpu": 2, "gpu": 1}), a
    PlacementGroupFactory, a ScalingConfig, or a function config -> one of those."""
    if not callable(resources):
        resource_dict_to_pg_factory(resources)  # a bad spec fails here, not in fit()
    if inspect.isclass(trainable):
        class _WithResources(trainable):  # type: ignore[valid-type, misc]
            pass

        _WithResources.__name__ = trainable.__name__
        _WithResources._tune_resources = resources
        return _WithResources

    @functools.wraps(trainable)
    def inner(*args: Any, **kwargs: Any) -> Any:
        return trainable(*args, **kwargs)

    inner._tune_resources = resources  # type: ignore[attr-defined]
    return inner


def trial_resources(trainable: Any, config: dict) -> Any:
    """The PlacementGroupFactory for a trial of this trainable with this config."""
    spec: Any = getattr(trainable, "_tune_resources", None)
    if callable(spec) and not hasattr(spec, "bundles"):
        spec = spec(config)
    if spec is None and inspect.isclass(trainable) and issubclass(trainable, Trainable):
        spec = trainable.default_resource_request(config)
    if spec is None and hasattr(trainable, "scaling_config"):  # a Train trainer
        # counted as its workers' bundles (so trials do not oversubscribe the cluster); the
        # trial's own actor takes nothing, its workers are the trainer's actors
        spec = config.get("scaling_config", trainable.scaling_config)
    return resource_dict_to_pg_factory(spec)

