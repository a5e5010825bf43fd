"""scikit-learn model selection fanned out over a cluster with Ray's joblib backend.

`register_ray()` then `joblib.parallel_backend("ray")`: GridSearchCV's fits and cross_val_score's
folds run on the cluster (ray), against joblib's own process backend (native). Every estimator
has a fixed random_state, so both give the same scores.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import main, start_ray  # noqa: E402


def program(backend: str, cpus: int) -> dict:
    import joblib
    from sklearn.datasets import make_classification
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.model_selection import GridSearchCV, cross_val_score
    from sklearn.svm import SVC

    X, y = make_classification(n_samples=600, n_features=20, n_informative=8, random_state=0)
    grid = {"C": [0.1, 1.0, 10.0], "gamma": ["scale", 0.01, 0.1], "kernel": ["rbf"]}
    with joblib.parallel_backend(backend, n_jobs=cpus):
        search = GridSearchCV(SVC(random_state=0), grid, cv=5, n_jobs=cpus).fit(X, y)
        forest = RandomForestClassifier(n_estimators=40, random_state=0)
        scores = cross_val_score(forest, X, y, cv=5, n_jobs=cpus)
    return {"best_params": search.best_params_, "best_score": search.best_score_,
            "mean_test_score": list(search.cv_results_["mean_test_score"]),
            "forest_scores": list(scores)}


def on_ray(cpus: int) -> dict:
    from ray.util.joblib import register_ray

    register_ray()
    return program("ray", cpus)


def native(cpus: int) -> dict:
    return program("loky", cpus)


if __name__ == "__main__":
    main(on_ray, native, start_ray)
