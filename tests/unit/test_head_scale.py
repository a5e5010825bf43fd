"""Pure parts of the head that must stay cheap at thousands of nodes."""

from __future__ import annotations

from raylite._core.timeseries import TimeSeriesStore


def test_history_keeps_a_stable_set_when_a_sample_has_more_series_than_fit():
    """Per-node series of a big cluster outnumber max_series: each sample used to evict, with a
    scan of every series, the stalest one per newcomer (all of them, every 5 s); now the kept
    set stays and the newcomers wait for room."""
    ts = TimeSeriesStore(capacity=4, max_series=3)
    sample = {f"node{i}": float(i) for i in range(5)}
    ts.add(sample, t=1)
    kept = ts.names()
    assert len(kept) == 3
    ts.add(sample, t=2)
    assert ts.names() == kept
    assert ts.query(kept)[kept[0]] == [sample[kept[0]]] * 2
    # a series absent from a sample gives its room to a newcomer
    ts.add({**{k: 1.0 for k in kept[1:]}, "late": 9.0}, t=3)
    assert "late" in ts.names() and kept[0] not in ts.names()
