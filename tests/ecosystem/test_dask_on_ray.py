"""Dask on Ray (ray.util.dask): dataframe groupby/merge and array reductions match Dask's sync scheduler."""

from tests.ecosystem._programs import ray_matches_native, require


def test_dask_dataframes_and_arrays_on_raylite_match_the_sync_scheduler(tmp_path):
    require("dask.dataframe", "dask[dataframe,array]==2026.8.0")
    result = ray_matches_native("dask_on_ray", tmp_path)
    assert result["rows"] == 400_000 and len(result["by_store_revenue"]) == 50
    assert len(result["by_region"]) == 5
