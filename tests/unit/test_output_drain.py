"""A worker's drain() before each reply (worker/output.py): it waits while a pipe still holds
what the task printed, for the I/O loop to take it, and not at all once the pipes are empty,
even where the task closed its own stdout (the pipe then reports a hang-up forever)."""

from __future__ import annotations

import os
import threading

from raylite._core.worker import output
from raylite._core.worker.output import OutputForwarder, _Stream


def forwarder_on(*read_fds: int) -> OutputForwarder:
    fwd = OutputForwarder(None, threading.current_thread(), lambda msg: None, "/nonexistent", "w", lambda: (b"", ""))
    fwd._streams = [_Stream(fd, name, -1) for fd, name in zip(read_fds, ("stdout", "stderr"))]
    return fwd


def test_drain_returns_at_once_when_the_pipes_are_empty_or_hung_up(monkeypatch) -> None:
    naps = []
    monkeypatch.setattr(output.time, "sleep", naps.append)
    (r1, w1), (r2, w2) = os.pipe(), os.pipe()
    try:
        fwd = forwarder_on(r1, r2)
        fwd.drain()
        os.close(w1)  # the task closed fd 1: POLLHUP, no data
        w1 = -1
        fwd.drain()
        assert naps == []
    finally:
        for fd in (r1, r2, w1, w2):
            if fd >= 0:
                os.close(fd)


def test_drain_waits_until_the_loop_has_read_what_was_printed(monkeypatch) -> None:
    r, w = os.pipe()
    os.write(w, b"hello\n")
    naps = []

    def nap(seconds: float) -> None:  # the I/O loop, meanwhile, reads the pipe on its third turn
        naps.append(seconds)
        if len(naps) == 3:
            assert os.read(r, 100) == b"hello\n"

    monkeypatch.setattr(output.time, "sleep", nap)
    try:
        forwarder_on(r).drain()
        assert len(naps) == 3
    finally:
        os.close(r)
        os.close(w)


def test_drain_gives_up_on_a_writer_that_never_stops(monkeypatch) -> None:
    r, w = os.pipe()
    os.write(w, b"x")
    naps = []
    monkeypatch.setattr(output.time, "sleep", naps.append)
    try:
        forwarder_on(r).drain()
        assert len(naps) == 200  # bounded: about 0.2 s, then the reply goes anyway
    finally:
        os.close(r)
        os.close(w)


def test_drain_from_many_threads_at_once() -> None:
    # a threaded actor's calls reply from their own threads: each polls the pipes itself
    r, w = os.pipe()
    fwd = forwarder_on(r)
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def replies() -> None:
        start.wait()
        try:
            for _ in range(2000):
                fwd.drain()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=replies) for _ in range(8)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        os.close(r)
        os.close(w)
    assert errors == []
