"""Daft's Ray runner (daft.set_runner_ray()) gives the native runner's answers: UDF, join, groupby, sort."""

from tests.ecosystem._programs import ray_matches_native, require


def test_daft_query_on_raylite_matches_the_native_runner(tmp_path):
    require("daft", "daft==0.7.26")
    result = ray_matches_native("daft_on_ray", tmp_path)
    assert result["joined_rows"] == 200_000
    assert sorted(set(result["summary"]["band"])) == ["high", "low", "mid"]
    assert sum(result["summary"]["orders"]) == 200_000
