"""A stranger holding more silent connections than the head has descriptors must not lock the
cluster out (issue 33, finding 2). The head's open-file limit is lowered to 1024 (soft and
hard, `ulimit -n 1024`), 1,100 silent connections are spread over its TCP listeners (head RPC,
node RPC, object transfer, the Ray Client server) and held (one closed is opened again), and while they are held ten real clients
(drivers and `ray://` clients) connect and run a task. Also: the process-wide budget closes the
oldest stranger of any listener, and the daemon lifts its soft limit to the hard one."""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import psutil
import pytest

from raylite._core import config as config_mod
from raylite._core.cluster import cluster as C
from raylite._core.transport import gate as G

from ..cluster.conftest import free_port, stop_started_head

FLOOD = 1100
LIMIT = 1024

DRIVER = """
import sys, raylite
raylite.init(address=sys.argv[1])
@raylite.remote
def f(x):
    return x + 1
print("ok", raylite.get(f.remote(1), timeout=120))
"""


def _connect(target: tuple[str, int]) -> socket.socket:
    s = socket.socket()
    s.setblocking(False)
    with contextlib.suppress(BlockingIOError):
        s.connect(target)
    return s


class Flood:
    """Holds `n` silent connections spread over `targets`, opening a new one for each that the
    head closes (an attacker keeps its sockets), until stopped."""

    def __init__(self, targets: list[tuple[str, int]], n: int) -> None:
        self.targets = targets
        self.socks = [_connect(targets[i % len(targets)]) for i in range(n)]
        self.reopened = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._hold, daemon=True)
        self._thread.start()

    def _hold(self) -> None:
        while not self._stop.wait(0.2):
            for i, s in enumerate(self.socks):
                try:
                    gone = s.recv(1) == b""
                except BlockingIOError:
                    gone = False
                except OSError:
                    gone = True
                if gone:
                    s.close()
                    self.socks[i] = _connect(self.targets[i % len(self.targets)])
                    self.reopened += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for s in self.socks:
            s.close()


def _run_clients(cmds: list[list[str]], env: dict) -> list[subprocess.CompletedProcess]:
    results: list = [None] * len(cmds)

    def one(i: int) -> None:
        results[i] = subprocess.run(cmds[i], env=env, capture_output=True, text=True, timeout=240)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(cmds))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="lowering another process's RLIMIT_NOFILE needs root")
def test_a_descriptor_flood_does_not_lock_out_drivers_and_ray_clients(monkeypatch):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 8192), max(hard, 8192)))  # this test's own
    cfg = config_mod.get_config().replace(temp_dir=tempfile.mkdtemp(prefix="rlfl", dir="/tmp"), token="")
    rc_port, agent_port = free_port(), free_port()
    monkeypatch.setenv("RAYLITE_RAY_CLIENT_SERVER_PORT", str(rc_port))
    monkeypatch.setenv("RAYLITE_HANDSHAKE_TIMEOUT_S", "600")  # strangers stay until evicted
    monkeypatch.delenv("RAYLITE_TOKEN", raising=False)
    head = None
    flood = None
    try:
        head = C.start_node(cfg, head=True, port=free_port(), node_ip="127.0.0.1", num_cpus=2,
                            agent_port=agent_port)
        resource.prlimit(head.pid, resource.RLIMIT_NOFILE, (LIMIT, LIMIT))
        token = open(os.path.join(head.session_dir, "token")).read().strip()
        listening = {c.laddr.port for c in psutil.Process(head.pid).net_connections("tcp")
                     if c.status == psutil.CONN_LISTEN}
        assert {rc_port, agent_port} <= listening
        # head and node RPC, object transfer, the Ray Client server (the health server holds at
        # most 64 waiting connections of its own, so strangers there cannot exhaust the head)
        targets = [("127.0.0.1", port) for port in sorted(listening - {agent_port})]
        flood = Flood(targets, FLOOD)
        env = {**os.environ, "RAYLITE_TOKEN": token, "RAYLITE_TEMP_DIR": cfg.temp_dir}
        env.pop("RAYLITE_RAY_CLIENT_SERVER_PORT", None)
        cmds = ([[sys.executable, "-c", DRIVER, head.address]] * 6
                + [[sys.executable, "-c", DRIVER, f"ray://127.0.0.1:{rc_port}"]] * 4)
        results = _run_clients(cmds, env)
        failed = [(r.returncode, r.stderr[-800:]) for r in results if "ok 2" not in r.stdout]
        assert not failed, f"{len(failed)} of 10 clients failed under the flood: {failed[:2]}"
        assert head.process.poll() is None
    finally:
        if flood is not None:
            flood.stop()
        stop_started_head(cfg, head)
        shutil.rmtree(cfg.temp_dir, ignore_errors=True)


def test_the_process_budget_evicts_the_oldest_stranger_of_any_listener(monkeypatch):
    budget = G.StrangerBudget(limit=3)
    monkeypatch.setattr(G, "STRANGERS", budget)
    closed = []
    a, b = G.HandshakeGate("a", 100), G.HandshakeGate("b", 100)
    a.admit("a1", lambda: closed.append("a1"))
    b.admit("b1", lambda: closed.append("b1"))
    a.admit("a2", lambda: closed.append("a2"))
    assert closed == []
    b.admit("b2", lambda: closed.append("b2"))  # the fourth stranger of the process
    assert closed == ["a1"]
    a.release("a2")  # authenticated: no longer counted
    b.admit("b3", lambda: closed.append("b3"))
    assert closed == ["a1"] and budget.pending == 3
    assert budget.shed(2) == 2 and closed == ["a1", "b1", "b2"]


def test_the_budget_stays_below_the_open_file_limit(monkeypatch):
    monkeypatch.setattr(G, "open_file_limit", lambda: 1024)
    assert G.StrangerBudget().limit == 1024 // 2 - G.RESERVED_FDS
    monkeypatch.setattr(G, "open_file_limit", lambda: 1 << 20)
    per = config_mod.get_config().max_pending_handshakes
    assert G.StrangerBudget().limit == 4 * per


def test_daemons_lift_the_soft_open_file_limit_to_the_hard_one():
    code = ("import resource; from raylite._core.transport.gate import raise_open_file_limit; "
            "resource.setrlimit(resource.RLIMIT_NOFILE, (256, 4096)); raise_open_file_limit(); "
            "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert out.stdout.strip() == "4096", out.stderr


def test_an_rpc_stranger_evicted_by_the_process_budget_frees_its_listeners_slot(monkeypatch):
    """Two RPC listeners of one process, each allowing 100 strangers, share a budget of 3: the
    oldest stranger of either is closed, both listeners' counts stay true, and a real client
    still authenticates."""
    import asyncio

    from raylite._core.transport import rpc

    budget = G.StrangerBudget(limit=3)
    monkeypatch.setattr(G, "STRANGERS", budget)
    cfg = config_mod.get_config().replace(handshake_timeout_s=60.0, max_pending_handshakes=100)
    monkeypatch.setattr(config_mod, "_CONFIG", cfg)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    gates = set()

    def run(coro):
        return asyncio.run_coroutine_threadsafe(coro, loop).result(30)

    async def start():
        servers = [await rpc.listen("tcp://127.0.0.1:0", {}, token="secret",
                                    on_connect=lambda c: gates.add(c._gate)) for _ in range(2)]
        return servers, [s.sockets[0].getsockname()[1] for s in servers]

    servers, ports = run(start())
    socks = []
    try:
        for i in range(6):
            socks.append(socket.create_connection(("127.0.0.1", ports[i % 2]), timeout=10))
        deadline = time.monotonic() + 20
        while budget.pending > 3 or sum(g.pending for g in gates) > 3:
            assert time.monotonic() < deadline, (budget.pending, [g.pending for g in gates])
            time.sleep(0.05)
        def closed(s: socket.socket) -> bool:
            s.settimeout(0.2)
            try:
                return s.recv(1) == b""
            except TimeoutError:
                return False

        deadline = time.monotonic() + 20  # three (the oldest the server accepted) were closed
        while sum(closed(s) for s in socks) < 3:
            assert time.monotonic() < deadline
        assert sum(closed(s) for s in socks) == 3

        async def real_client():
            conn = await rpc.connect(f"tcp://127.0.0.1:{ports[0]}", {}, token="secret", role="cli")
            conn.close()
            return True

        assert run(real_client())
        assert budget.pending == sum(g.pending for g in gates) <= 3
    finally:
        for s in socks:
            s.close()
        for s in servers:
            loop.call_soon_threadsafe(s.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
