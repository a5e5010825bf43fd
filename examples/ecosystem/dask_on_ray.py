"""Dask dataframes and arrays computed as Ray tasks ("Dask on Ray").

The same Dask program runs with `scheduler=ray_dask_get` and, after `enable_dask_on_ray()`, with
plain `.compute()` (ray), and with Dask's own single-threaded scheduler (native).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import main, start_ray  # noqa: E402


def frames():
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    n = 400_000
    sales = pd.DataFrame({"store": rng.integers(0, 50, n), "item": rng.integers(0, 500, n),
                          "qty": rng.integers(1, 10, n), "price": rng.random(n).round(2) * 100})
    stores = pd.DataFrame({"store": np.arange(50), "region": [f"r{i % 5}" for i in range(50)]})
    return sales, stores


def program(scheduler) -> dict:
    import dask
    import dask.array as da
    import dask.dataframe as dd

    sales, stores = frames()
    ddf = dd.from_pandas(sales, npartitions=16)
    ddf["revenue"] = ddf.qty * ddf.price
    by_store = ddf.groupby("store").agg({"revenue": "sum", "qty": "mean"})
    by_region = ddf.merge(dd.from_pandas(stores, npartitions=1), on="store").groupby("region").revenue.sum()
    x = da.random.RandomState(0).random_sample((3_000, 3_000), chunks=(500, 500))
    stats = [x.mean(), x.std(), (x @ x.T).trace(), x.max(axis=0).sum()]
    kw = {} if scheduler is None else {"scheduler": scheduler}
    store_df, region_s = dask.compute(by_store, by_region, **kw)
    numbers = dask.compute(*stats, **kw)  # arrays apart from frames: Dask warns when they are mixed
    store_df = store_df.sort_index()
    return {"by_store_revenue": list(store_df.revenue), "by_store_qty": list(store_df.qty),
            "by_region": dict(region_s.sort_index()), "array_stats": [float(v) for v in numbers],
            "rows": int(ddf.shape[0].compute(**kw))}


def on_ray(cpus: int) -> dict:
    from ray.util.dask import disable_dask_on_ray, enable_dask_on_ray, ray_dask_get

    explicit = program(ray_dask_get)
    enable_dask_on_ray()
    try:
        implicit = program(None)
    finally:
        disable_dask_on_ray()
    assert implicit == explicit, "enable_dask_on_ray() changed the results"
    return explicit


def native(cpus: int) -> dict:
    return program("sync")


if __name__ == "__main__":
    main(on_ray, native, start_ray)
