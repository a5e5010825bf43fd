"""Modin on its Ray engine (MODIN_ENGINE=ray) gives pandas' answers: read_csv, apply, groupby/agg, merge."""

from tests.ecosystem._programs import ray_matches_native, require


def test_modin_report_on_raylite_matches_pandas(tmp_path):
    require("modin", "modin==0.37.1")
    result = ray_matches_native("modin_on_ray", tmp_path)
    assert result["rows"] == 300_000 and result["store_rows"] == 200
    assert len(result["per_city"]) == 17 and set(result["by_size"]) == {"bulk", "single"}
