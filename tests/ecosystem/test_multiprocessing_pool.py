"""ray.util.multiprocessing.Pool runs standard-library Pool code with the standard library's results."""

from tests.ecosystem._programs import ray_matches_native, require


def test_pool_program_on_raylite_matches_multiprocessing(tmp_path):
    require("multiprocessing", "(standard library)")
    result = ray_matches_native("multiprocessing_pool", tmp_path)
    assert abs(result["pi"] - 3.14159) < 0.01
    assert result["pairs_sum"] == sum(i * 31 + i + 1 for i in range(1_000))
