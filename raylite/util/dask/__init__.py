"""raylite.util.dask: compute Dask collections on raylite (Ray's "Dask on Ray" names).

    import dask
    from raylite.util.dask import enable_dask_on_ray, ray_dask_get
    dask.compute(ddf.x.sum(), scheduler=ray_dask_get)
    enable_dask_on_ray()      # every .compute() now runs on raylite
"""

from __future__ import annotations

from typing import Any

from raylite.util.dask.scheduler import ray_dask_get, ray_dask_get_sync


def _config() -> Any:
    try:
        import dask
    except ImportError as exc:
        raise ImportError("Dask on raylite needs dask: `pip install 'dask[dataframe]'`") from exc
    return dask.config


def enable_dask_on_ray(shuffle: str | None = "tasks", use_shuffle_optimization: bool = True) -> Any:
    """Make `ray_dask_get` Dask's default scheduler (and shuffles task-based, which it can run).

    Returns Dask's config context, so `with enable_dask_on_ray(): ...` undoes it on exit.
    `use_shuffle_optimization` is accepted for Ray compatibility; shuffles run as plain tasks.
    """
    settings: dict[str, Any] = {"scheduler": ray_dask_get}
    if shuffle is not None:
        settings["dataframe.shuffle.method"] = shuffle
    return _config().set(settings)


def disable_dask_on_ray() -> Any:
    """Give Dask back its own default scheduler and shuffle method."""
    return _config().set({"scheduler": None, "dataframe.shuffle.method": None})


__all__ = ["disable_dask_on_ray", "enable_dask_on_ray", "ray_dask_get", "ray_dask_get_sync"]
