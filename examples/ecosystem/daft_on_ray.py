"""A Daft dataframe query on Daft's Ray runner (`daft.set_runner_ray()`).

Orders joined with customers, a Python UDF computing a tax band, a groupby/agg and a sort: run
on the Ray runner (ray) and on Daft's native runner (native); the collected results must agree.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import main  # noqa: E402

N_ORDERS = 200_000


def write_orders(folder: str, files: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    per_file = N_ORDERS // files
    for f in range(files):
        ids = range(f * per_file, (f + 1) * per_file)
        pq.write_table(pa.table({"order": list(ids), "customer": [(i * 7919) % 1_000 for i in ids],
                                 "amount": [float((i * 104_729) % 1_000) for i in ids]}),
                       f"{folder}/orders-{f}.parquet")


def program(cpus: int) -> dict:
    import daft
    from daft import col

    @daft.func(return_dtype=daft.DataType.string())
    def band(amount: float) -> str:
        return "high" if amount >= 750 else "mid" if amount >= 250 else "low"

    with tempfile.TemporaryDirectory() as folder:
        write_orders(folder, files=8)
        orders = daft.read_parquet(f"{folder}/*.parquet").collect()  # one partition per file
    customers = daft.from_pydict({"customer": list(range(1_000)),
                                  "country": [f"c{i % 12}" for i in range(1_000)]})
    orders = orders.with_column("band", band(col("amount")))
    joined = orders.join(customers, on="customer")
    summary = (joined.groupby("country", "band")
               .agg(col("amount").sum().alias("total"), col("order").count().alias("orders"))
               .sort(["country", "band"]))
    rows = summary.to_pydict()
    top = joined.sort(["amount", "order"], desc=[True, False]).limit(3).select("order", "country").to_pydict()
    return {"summary": rows, "top": top, "joined_rows": joined.count_rows()}


def start_daft_on_ray(cpus: int) -> None:
    """Daft's documented set-up: start Ray (or give its address), then pick the Ray runner."""
    import daft
    import ray

    ray.init(num_cpus=cpus)
    daft.set_runner_ray()


def on_ray(cpus: int) -> dict:
    import daft

    assert daft.get_or_create_runner().name == "ray"
    return program(cpus)


def native(cpus: int) -> dict:
    import daft

    daft.set_runner_native()
    return program(cpus)


if __name__ == "__main__":
    main(on_ray, native, start_daft_on_ray)
