"""Hamilton's RayGraphAdapter runs each dataflow node as a Ray task, with Hamilton's own results."""

from tests.ecosystem._programs import ray_matches_native, require


def test_hamilton_dataflow_on_raylite_matches_the_local_driver(tmp_path):
    require("hamilton", "apache-hamilton==1.90.0")
    result = ray_matches_native("hamilton_on_ray", tmp_path)
    assert len(result["columns"]) == 6 and result["sums"]["spend"] > 0
