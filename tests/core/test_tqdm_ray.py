"""ray.experimental.tqdm_ray: bars updated in tasks are drawn by the driver, not printed raw."""

from __future__ import annotations

import io

import raylite as ray
from raylite._core.client import progress_bars
from raylite.experimental.tqdm_ray import tqdm
from tests.conftest import wait_for


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_board_turns_worker_lines_into_bars_and_lets_other_lines_through():
    out, clock = io.StringIO(), _Clock()
    board = progress_bars.Board(stream=out, clock=clock)
    assert not board.handle_line("(f pid=1) ", "an ordinary line")
    state = {"uuid": "u1", "x": 0, "desc": "load", "total": 4, "unit": "it", "closed": False}
    assert board.handle_line("(f pid=1) ", progress_bars.encode(state))
    clock.now += 2
    assert board.handle_line("(f pid=1) ", progress_bars.encode({**state, "x": 2}))
    assert board.bars()[("(f pid=1) ", "u1")].n == 2
    clock.now += 2
    board.handle_line("(f pid=1) ", progress_bars.encode({**state, "x": 4, "closed": True}))
    assert board.bars() == {}
    lines = out.getvalue().splitlines()
    # not a terminal: one line when the bar starts and one when it closes
    assert lines[0].startswith("(f pid=1) load:   0%")
    assert lines[-1].startswith("(f pid=1) load: 100%") and "4/4" in lines[-1]
    assert len(lines) == 2


@ray.remote
def count_with_bar(name, n):
    for _ in tqdm(range(n), desc=name, flush_interval_s=0):
        pass
    return n


def test_task_bars_reach_the_driver_drawn(cluster, capfd):
    assert ray.get([count_with_bar.remote("task 1", 5), count_with_bar.remote("task 2", 3)], timeout=60) == [5, 3]
    seen = {"out": "", "err": ""}

    def drawn():
        captured = capfd.readouterr()
        seen["out"] += captured.out
        seen["err"] += captured.err
        return "task 1: 100%" in seen["err"] and "task 2: 100%" in seen["err"]

    try:
        wait_for(drawn, timeout_s=30, what="both bars drawn as finished on the driver's stderr")
    except AssertionError as e:  # say what did arrive, and what the board still holds
        raise AssertionError(f"{e}; stderr: {seen['err'][-2000:]!r}; stdout: {seen['out'][-2000:]!r}; "
                             f"open bars: {progress_bars.BOARD.bars()}") from None
    assert progress_bars.MAGIC not in seen["out"] + seen["err"]


def test_bar_in_the_driver_draws_directly():
    bar = tqdm(total=2, desc="driver bar")
    bar.update(2)
    bar.close()
    assert bar.n == 2 and bar.total == 2


def test_a_line_the_drivers_stream_refuses_does_not_drop_the_bars_after_it(monkeypatch):
    from types import SimpleNamespace

    from raylite._core.cluster import driver

    class Closed(io.StringIO):
        def write(self, text):
            raise ValueError("I/O operation on closed file")

    drawn = io.StringIO()
    monkeypatch.setattr(progress_bars.BOARD, "_stream", drawn)
    monkeypatch.setattr("sys.stdout", Closed())
    state = {"uuid": "u-refused", "x": 3, "desc": "after", "total": 3, "unit": "it", "closed": True}
    driver._print_worker_output(SimpleNamespace(stream="stdout", prefix="(f pid=1) ",
                                                lines=["a plain line", progress_bars.encode(state)]))
    assert "(f pid=1) after: 100%" in drawn.getvalue()
