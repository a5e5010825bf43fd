"""A Hamilton dataflow whose nodes run as Ray tasks (Hamilton's `RayGraphAdapter`).

Marketing features computed from raw spend and sign-up series: every function of
hamilton_features.py is a node of the dataflow; with the Ray adapter each node is a Ray task (ray), without it Hamilton runs them
in this process (native). Both must produce the same frame.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import main, start_ray  # noqa: E402

OUTPUTS = ["spend", "signups", "avg_3wk_spend", "spend_per_signup", "spend_zero_mean_unit_variance",
           "signups_cumulative"]


def program(adapter) -> dict:
    import hamilton_features
    import numpy as np
    import pandas as pd
    from hamilton import driver

    builder = driver.Builder().with_modules(hamilton_features)
    if adapter is not None:
        builder = builder.with_adapters(adapter)
    dr = builder.build()
    rng = np.random.default_rng(3)
    raw = pd.DataFrame({"spend": rng.integers(10, 100, 5_000).astype(float),
                        "signups": rng.integers(1, 50, 5_000).astype(float)})
    frame = pd.DataFrame(dr.execute(OUTPUTS, inputs={"raw": raw}))  # the native driver returns a dict
    return {"columns": list(frame.columns), "sums": frame.sum().round(6).to_dict(),
            "tail": frame.tail(3).round(6).values.tolist()}


def on_ray(cpus: int) -> dict:
    from hamilton import base
    from hamilton.plugins import h_ray

    return program(h_ray.RayGraphAdapter(result_builder=base.PandasDataFrameResult()))


def native(cpus: int) -> dict:
    return program(None)


if __name__ == "__main__":
    main(on_ray, native, start_ray)
