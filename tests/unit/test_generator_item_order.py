"""A generator task's items and its final reply leave the worker through one FIFO: an item
queued on the loop by a callback of its own could be overtaken by the reply, drained by a batch
of calls scheduled earlier, and the owner would end the generator without that item (a dynamic
generator read on another node came back short)."""

from __future__ import annotations

from raylite._core import protocol as P
from raylite._core.task_spec import TaskSpec
from raylite._core.worker.worker import Worker


class _Client:
    def __init__(self) -> None:
        self.sent: list = []

    def call_soon(self, fn, *args) -> None:
        self.sent.append(args[1])

    @property
    def loop(self):  # any send that bypasses call_soon fails the test
        raise AssertionError("a generator item bypassed the worker's call queue")


def test_items_and_reply_share_the_call_queue():
    worker = Worker.__new__(Worker)
    worker.client = _Client()
    worker._output = None
    worker._store = lambda oid, value, spec: [oid, "v", value]
    spec = TaskSpec.__new__(TaskSpec)
    object.__setattr__(spec, "task_id", b"t" * 24)

    reply = worker._stream(conn=None, spec=spec, result=iter([1, 2, 3]))
    worker._reply(None, 7, reply)

    kinds = [type(m) for m in worker.client.sent]
    assert kinds == [P.GeneratorItem] * 3 + [P.PushTaskReply]
    assert [m.index for m in worker.client.sent[:3]] == [0, 1, 2]
