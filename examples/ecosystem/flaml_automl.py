"""FLAML's AutoML with n_concurrent_trials=2: FLAML sees `ray` importable and runs its search
through `ray.tune.run` by itself (ray); with one trial at a time it uses its own loop (native).

A FLAML user who never asked for Ray gets Ray's path as soon as `ray` imports, so it has to
work. Both modes search random forests and extra-trees on the same classification data with the
same seed and iteration budget and report the held-out accuracy of the model FLAML picked; the
two searches run trials in a different order (two at a time), so the accuracies are compared
with a tolerance by the test, not for equality.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import main, start_ray  # noqa: E402

ITERATIONS = 8


def program(concurrent: int) -> dict:
    from flaml import AutoML
    from sklearn.datasets import make_classification
    from sklearn.model_selection import train_test_split

    X, y = make_classification(n_samples=600, n_features=12, n_informative=6, random_state=0)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, random_state=0)
    automl = AutoML()
    automl.fit(X_train, y_train, task="classification", metric="accuracy", time_budget=-1,
               max_iter=ITERATIONS, estimator_list=["rf", "extra_tree"], n_concurrent_trials=concurrent,
               seed=0, verbose=0, log_file_name="", retrain_full=True)
    accuracy = float((automl.predict(X_test) == y_test).mean())
    return {"best_estimator": automl.best_estimator in ("rf", "extra_tree"),
            "best_val_accuracy": 1 - automl.best_loss, "test_accuracy": accuracy,
            "used_ray": bool(getattr(automl, "_use_ray", False))}


def on_ray(cpus: int) -> dict:
    return program(concurrent=2)


def native(cpus: int) -> dict:
    return program(concurrent=1)


if __name__ == "__main__":
    main(on_ray, native, start_ray)
