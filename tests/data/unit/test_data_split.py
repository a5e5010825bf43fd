"""streaming_split: the equal-split rule (pure) and shards consumed by concurrent threads."""

import threading

import pytest

import raylite.data as rd
from raylite.data._internal.split import OutputSplitter
from raylite.data.block import BlockMetadata


def _meta(n):
    return BlockMetadata(n, n * 8)


def test_equal_splitter_never_gives_more_than_the_final_share():
    sp = OutputSplitter(2, equal=True)
    sp.add([("b0", _meta(10))])
    assert sp.take(0) == [("b0", 0, 5)]
    assert sp.take(0) == []  # ahead of shard 1: wait for more data
    assert sp.take(1) == [("b0", 5, 10)]
    sp.add([("b1", _meta(3))])
    assert sp.take(0) == [("b1", 0, 1)]  # seen=13 -> share 6
    sp.finish()
    assert sp.take(1) == [("b1", 1, 2)]
    assert sp.take(0) is None and sp.take(1) is None  # 1 leftover row dropped
    assert sp.given == [6, 6]


def test_unequal_splitter_hands_out_whole_blocks_on_demand():
    sp = OutputSplitter(3, equal=False)
    sp.add([("a", _meta(4)), ("b", _meta(2))])
    assert sp.take(2) == [("a", 0, 4)] and sp.take(0) == [("b", 0, 2)] and sp.take(1) == []
    sp.finish()
    assert sp.take(1) is None


def _consume(iterators, epochs=1):
    results = [[[] for _ in range(epochs)] for _ in iterators]
    errors = []

    def run(i):
        try:
            for e in range(epochs):
                for batch in iterators[i].iter_batches(batch_size=7):
                    results[i][e].extend(batch["id"].tolist())
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(iterators))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    return results


@pytest.mark.parametrize("equal", [True, False])
def test_streaming_split_shards_are_disjoint_and_cover_every_epoch(local, equal):
    ds = rd.range(103, override_num_blocks=5).map(lambda r: r)
    shards = ds.streaming_split(2, equal=equal)
    results = _consume(shards, epochs=2)
    for epoch in range(2):
        a, b = results[0][epoch], results[1][epoch]
        assert not set(a) & set(b)
        if equal:
            assert len(a) == len(b) == 51
            assert len(set(a) | set(b)) == 102
        else:
            assert sorted(a + b) == list(range(103))
