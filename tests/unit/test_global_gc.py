"""Ray's automatic global GC (P.CollectGarbage): who may start one and how often it runs.

A node whose store is past store_usage_gc_threshold asks the head (at most once per
global_gc_min_interval_s); only a registered node's request makes the head tell every node;
a node passes it on only when it comes from its head; a process collects only when its node
asks, at most once per local_gc_min_interval_s."""

from __future__ import annotations

from types import SimpleNamespace

from raylite._core import protocol as P
from raylite._core.client import core_client
from raylite._core.client.core_client import CoreClient
from raylite._core.config import Config
from raylite._core.head.head import Head
from raylite._core.node.node import NodeDaemon as Node


class Link:
    def __init__(self, closed: bool = False) -> None:
        self.sent: list = []
        self.closed = closed
        self.context: dict = {}

    def send(self, msg, rid: int = 0) -> None:
        self.sent.append(msg)

    def is_closed(self) -> bool:
        return self.closed


def test_the_head_tells_every_live_node_but_only_when_a_node_asks() -> None:
    a, b, gone = Link(), Link(), Link(closed=True)
    head = SimpleNamespace(store=SimpleNamespace(nodes={1: SimpleNamespace(link=a), 2: SimpleNamespace(link=b),
                                                        3: SimpleNamespace(link=gone)}))
    driver = Link()
    Head._on_collect_garbage(head, driver, P.CollectGarbage(), 0)  # a driver's connection: ignored
    assert a.sent == b.sent == []
    node = Link()
    node.context["node_id"] = b"n"
    Head._on_collect_garbage(head, node, P.CollectGarbage(), 0)
    assert [type(m) for m in a.sent + b.sent] == [P.CollectGarbage, P.CollectGarbage] and gone.sent == []


def fake_node(used: int, capacity: int = 100, head: Link | None = None) -> SimpleNamespace:
    workers = {1: SimpleNamespace(conn=Link()), 2: SimpleNamespace(conn=None)}
    node = SimpleNamespace(store=SimpleNamespace(used_bytes=used, capacity_bytes=capacity), config=Config(),
                           _last_global_gc=-float("inf"), head=head, pool=SimpleNamespace(workers=workers),
                           drivers={b"d": Link()})
    node._collect_garbage_here = lambda: Node._collect_garbage_here(node)
    return node


def test_a_node_asks_once_past_the_threshold_and_then_waits_the_interval() -> None:
    head = Link()
    node = fake_node(used=60, head=head)
    Node._gc_if_store_full(node)
    assert head.sent == []  # 60% < 70%
    node.store.used_bytes = 80
    Node._gc_if_store_full(node)
    Node._gc_if_store_full(node)  # within global_gc_min_interval_s
    assert [type(m) for m in head.sent] == [P.CollectGarbage]


def test_a_node_passes_it_to_its_workers_and_drivers_only_from_its_head() -> None:
    head = Link()
    node = fake_node(used=0, head=head)
    worker_conn, driver_conn = node.pool.workers[1].conn, node.drivers[b"d"]
    Node._on_collect_garbage(node, Link(), P.CollectGarbage(), 0)  # a worker or a driver: ignored
    assert worker_conn.sent == driver_conn.sent == []
    Node._on_collect_garbage(node, head, P.CollectGarbage(), 0)
    assert len(worker_conn.sent) == len(driver_conn.sent) == 1


def test_a_node_without_a_head_link_collects_its_own() -> None:
    node = fake_node(used=90, head=None)
    Node._gc_if_store_full(node)
    assert len(node.pool.workers[1].conn.sent) == 1


def test_a_process_collects_when_its_node_asks_at_most_once_per_interval(monkeypatch) -> None:
    collections = []
    monkeypatch.setattr(core_client.gc, "collect", lambda: collections.append(1))
    node_conn = Link()
    client = SimpleNamespace(links=SimpleNamespace(node=node_conn), config=Config(), _last_gc=-float("inf"))
    CoreClient._on_collect_garbage(client, Link(), P.CollectGarbage(), 0)  # not its node: ignored
    assert collections == []
    CoreClient._on_collect_garbage(client, node_conn, P.CollectGarbage(), 0)
    CoreClient._on_collect_garbage(client, node_conn, P.CollectGarbage(), 0)  # within local_gc_min_interval_s
    assert collections == [1]
