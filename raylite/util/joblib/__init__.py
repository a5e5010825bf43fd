"""raylite.util.joblib: run joblib (and scikit-learn's n_jobs) on raylite (Ray's name).

    from raylite.util.joblib import register_ray
    register_ray()
    with joblib.parallel_backend("ray"):
        GridSearchCV(...).fit(X, y)
"""

from __future__ import annotations


def register_ray() -> None:
    """Register the joblib backend named "ray"; needs joblib installed."""
    try:
        import joblib
    except ImportError as exc:
        raise ImportError("register_ray() needs joblib: `pip install joblib`") from exc
    from raylite.util.joblib.ray_backend import RayBackend

    joblib.register_parallel_backend("ray", RayBackend)


__all__ = ["register_ray"]
