"""``from_*_refs`` / ``to_*_refs`` through the submitter seam (in-process submitter): they
only use the submitter's tasks and refs, so they work on any submitter."""

import numpy as np
import pandas as pd
import pyarrow as pa

import raylite.data as rd


def test_refs_round_trip_on_the_local_submitter(local):
    frames = [pd.DataFrame({"a": [1, 2]}), pd.DataFrame({"a": [3]})]
    ds = rd.from_pandas_refs([local.put(f) for f in frames])
    assert ds.num_blocks() == 2 and ds.sum("a") == 6
    back = pd.concat(local.get(ds.to_pandas_refs()), ignore_index=True)
    pd.testing.assert_frame_equal(back, pd.concat(frames, ignore_index=True))
    assert rd.from_numpy_refs(local.put(np.arange(4))).count() == 4
    table_ref = local.put(pa.table({"x": [1, 2, 3]}))
    assert rd.from_arrow_refs(table_ref).to_arrow_refs() == [table_ref]
    assert [a.tolist() for a in local.get(ds.to_numpy_refs(column="a"))] == [[1, 2], [3]]
    tasks_before = local.tasks_submitted
    rd.from_arrow_refs([table_ref, table_ref])
    assert local.tasks_submitted - tasks_before == 2  # one metadata task per table, no fetch here
