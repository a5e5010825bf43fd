"""pandas code scaled out with Modin on its Ray engine (`MODIN_ENGINE=ray`).

A sales report: read two CSV files, derive a column with `apply`, aggregate with groupby/agg,
join with merge, and rank. The same function runs with `modin.pandas` on Ray (ray) and with plain
pandas (native); the results are compared as pandas objects turned into plain lists.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import main  # noqa: E402


def write_inputs(folder: str) -> tuple[str, str]:
    import numpy as np
    import pandas

    rng = np.random.default_rng(1)
    n = 300_000
    sales = pandas.DataFrame({"order": np.arange(n), "store": rng.integers(0, 200, n),
                              "qty": rng.integers(1, 20, n), "unit_cents": rng.integers(50, 5_000, n)})
    stores = pandas.DataFrame({"store": np.arange(200), "city": [f"city{i % 17}" for i in range(200)],
                               "opened": 1990 + np.arange(200) % 30})
    paths = os.path.join(folder, "sales.csv"), os.path.join(folder, "stores.csv")
    sales.to_csv(paths[0], index=False)
    stores.to_csv(paths[1], index=False)
    return paths


def program(pd, cpus: int) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        sales_csv, stores_csv = write_inputs(folder)
        sales = pd.read_csv(sales_csv)
        stores = pd.read_csv(stores_csv)
    sales["revenue"] = sales["qty"] * sales["unit_cents"] / 100.0
    sales["size"] = sales["qty"].apply(lambda q: "bulk" if q >= 10 else "single")
    sales["discounted"] = sales.apply(lambda row: row["revenue"] * (0.9 if row["qty"] >= 15 else 1.0), axis=1)
    per_store = sales.groupby("store").agg(revenue=("revenue", "sum"), orders=("order", "count"),
                                           mean_qty=("qty", "mean"))
    joined = per_store.reset_index().merge(stores, on="store", how="inner")
    per_city = joined.groupby("city").agg(revenue=("revenue", "sum"), stores=("store", "nunique"))
    per_city = per_city.sort_values("revenue", ascending=False)
    by_size = sales.groupby("size")["discounted"].sum().sort_index()
    top = joined.sort_values("revenue", ascending=False).head(5)[["store", "city", "revenue"]]
    to_pandas = getattr(per_city, "_to_pandas", None)
    per_city = to_pandas() if to_pandas else per_city
    return {"per_city": per_city.reset_index().values.tolist(), "by_size": by_size.to_dict(),
            "top": top.values.tolist(), "rows": len(sales), "store_rows": len(per_store)}


def start_modin_on_ray(cpus: int) -> None:
    """Modin's documented set-up: MODIN_ENGINE=ray before modin is imported, Ray started by us."""
    os.environ["MODIN_ENGINE"] = "ray"
    import ray

    ray.init(num_cpus=cpus)
    import modin.pandas  # noqa: F401  (engine start-up counts as initialisation)


def on_ray(cpus: int) -> dict:
    import modin.config
    import modin.pandas as mpd

    assert modin.config.Engine.get() == "Ray", modin.config.Engine.get()
    return program(mpd, cpus)


def native(cpus: int) -> dict:
    import pandas

    return program(pandas, cpus)


if __name__ == "__main__":
    main(on_ray, native, start_modin_on_ray)
