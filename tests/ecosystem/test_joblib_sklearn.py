"""scikit-learn under joblib's "ray" backend (ray.util.joblib.register_ray) scores like joblib's own."""

import pytest

from tests.ecosystem._programs import ray_matches_native, require


def test_grid_search_and_cross_val_on_raylite_match_loky(tmp_path):
    require("joblib", "joblib==1.6.0")
    pytest.importorskip("sklearn", reason="scikit-learn is not installed: pip install 'scikit-learn==1.9.1'")
    result = ray_matches_native("joblib_sklearn", tmp_path)
    assert len(result["mean_test_score"]) == 9 and len(result["forest_scores"]) == 5
    assert result["best_score"] == max(result["mean_test_score"])
