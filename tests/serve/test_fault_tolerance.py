"""The serving path survives its parts dying under load: a SIGKILLed proxy's port keeps
accepting and the proxy comes back; a SIGKILLed replica fails only the request that was running
in it (the others are retried elsewhere); a killed controller costs no request."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time

import httpx
import pytest

import raylite
from raylite.serve._internal.client import get_controller
from tests.conftest import process_gone, wait_for


class Load:
    """`n` threads sending GETs to `url` until stopped; every outcome is kept."""

    def __init__(self, url: str, n: int = 8) -> None:
        self.url = url
        self.outcomes: list[tuple[int, str]] = []  # (status or -1 for a connection error, text)
        self.stopping = False
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(n)]

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping = True
        for t in self.threads:
            t.join(60)

    def _run(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self.stopping:
                try:
                    r = client.get(self.url)
                    outcome = (r.status_code, r.text[:300])
                except httpx.HTTPError as e:
                    outcome = (-1, repr(e))
                with self.lock:
                    self.outcomes.append(outcome)

    def count(self) -> int:
        with self.lock:
            return len(self.outcomes)

    def wait_more(self, n: int, what: str) -> None:
        start = self.count()
        wait_for(lambda: self.count() >= start + n, timeout_s=60, what=what)

    def failures(self) -> list[tuple[int, str]]:
        with self.lock:
            return [o for o in self.outcomes if o[0] != 200]


def _proxy() -> tuple:
    node = raylite.get_runtime_context().get_node_id()
    actor = raylite.get_actor(f"SERVE_PROXY::{node}", namespace="serve")
    return actor, raylite.get(actor.ready.remote())


def _pid_of_restarted(actor) -> int | None:
    """The pid a restarting actor reports, or None while it is not back: a call sent before the
    caller learnt of the death fails with ActorDiedError (as in Ray), and is simply asked again."""
    try:
        return raylite.get(actor.ready.remote(), timeout=10).get("pid")
    except (raylite.exceptions.RayActorError, raylite.exceptions.GetTimeoutError):
        return None


def test_killed_proxy_port_keeps_accepting_and_a_new_proxy_serves_it(serve_instance):
    serve, url = serve_instance
    port = int(url.rsplit(":", 1)[1])

    @serve.deployment(num_replicas=2)
    def ok(request) -> str:
        return "ok"

    serve.run(ok.bind(), name="ok", route_prefix="/ok")
    actor, before = _proxy()
    with Load(f"{url}/ok", n=4) as load:
        load.wait_more(50, "requests before the kill")
        os.kill(before["pid"], signal.SIGKILL)
        wait_for(lambda: process_gone(before["pid"]), timeout_s=30, what="the proxy process to exit")
        # the listening socket outlives the proxy: no connection is ever refused
        refused = 0
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=10).close()
            except ConnectionRefusedError:
                refused += 1
        assert refused == 0
        wait_for(lambda: _pid_of_restarted(actor) not in (None, before["pid"]), timeout_s=30,
                 what="a new proxy process")
        load.wait_more(50, "requests after the restart")
    # only requests on connections the dead proxy had open can fail: at most one per client
    failures = load.failures()
    assert len(failures) <= 4, failures
    assert all(status == -1 for status, _ in failures), failures
    assert httpx.get(f"{url}/ok", timeout=10).text == "ok"
    st = serve.status()
    assert all(v == "HEALTHY" for v in st.proxies.values()), st.proxies
    serve.delete("ok")


def test_killed_socket_holder_takes_the_socket_back_from_the_proxy(serve_instance):
    serve, url = serve_instance
    port = int(url.rsplit(":", 1)[1])
    node = raylite.get_runtime_context().get_node_id()
    holder = raylite.get_actor(f"SERVE_PROXY_SOCKET::{node}", namespace="serve")
    old = raylite.get(holder.ready.remote())["pid"]
    os.kill(old, signal.SIGKILL)

    def new_holder() -> bool:
        try:
            info = raylite.get(holder.ready.remote(), timeout=5)
        except Exception:  # noqa: BLE001 - restarting
            return False
        return info["ok"] and info["pid"] != old

    wait_for(new_holder, timeout_s=30, what="the socket holder to restart and hold the port again")
    # now the proxy dies too: the restarted holder's copy keeps the port accepting
    actor, before = _proxy()
    os.kill(before["pid"], signal.SIGKILL)
    wait_for(lambda: process_gone(before["pid"]), timeout_s=30, what="the proxy process to exit")
    for _ in range(20):
        socket.create_connection(("127.0.0.1", port), timeout=10).close()  # never refused
    wait_for(lambda: httpx.get(f"{url}/-/healthz", timeout=10).status_code == 200, timeout_s=30,
             what="the restarted proxy to serve")


def test_killed_replica_fails_only_the_request_running_in_it(serve_instance):
    serve, url = serve_instance

    @serve.deployment(num_replicas=2, max_ongoing_requests=4)
    def slow(request) -> int:
        time.sleep(0.05)  # sync: one request in user code at a time, the others wait unread
        return os.getpid()

    serve.run(slow.bind(), name="slow", route_prefix="/slow")
    replicas = raylite.get(get_controller().list_replicas.remote("slow", "slow"))
    victim = replicas[0]["pid"]
    with Load(f"{url}/slow", n=8) as load:
        load.wait_more(40, "requests before the kill")
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: len([r for r in raylite.get(get_controller().list_replicas.remote("slow", "slow"))
                              if r["state"] == "RUNNING" and r["pid"] != victim]) == 2,
                 timeout_s=60, what="a replacement replica")
        load.wait_more(40, "requests after the replacement")
    failures = load.failures()
    # the victim had up to 4 requests: one sleeping in user code, the rest not yet read. Only the
    # first may fail, with an error that says so; the others were retried on the other replica.
    assert len(failures) <= 1, failures
    for status, text in failures:
        assert status == 500 and "died while running this request" in text, failures
    serve.delete("slow")


def test_a_request_that_kills_its_replica_runs_at_most_twice(serve_instance, tmp_path):
    """A fast handler is not acknowledged, so its request is resent when its replica dies -- but
    only once, acknowledged: a request that kills every replica it reaches takes down two, not
    the whole deployment, and then fails with an error saying so (HTTP and handle alike)."""
    serve, url = serve_instance
    runs = tmp_path / "runs"

    @serve.deployment(num_replicas=3, ray_actor_options={"num_cpus": 0.1})
    class Fragile:
        def __call__(self, request) -> int:
            if request.query_params.get("die"):
                self.die()
            return os.getpid()

        def die(self) -> None:
            with open(runs, "a") as f:
                f.write(f"{os.getpid()}\n")
            os._exit(1)

    handle = serve.run(Fragile.bind(), name="fragile", route_prefix="/fragile")

    def running() -> set:
        return {r["pid"] for r in raylite.get(get_controller().list_replicas.remote("fragile", "Fragile"))
                if r["state"] == "RUNNING"}

    before = wait_for(lambda: p if len(p := running()) == 3 else None, what="three replicas")
    r = httpx.get(f"{url}/fragile?die=1", timeout=60)
    assert r.status_code == 500 and "died while running this request" in r.text, r.text
    killed = runs.read_text().split()
    assert len(killed) == 2 and len(set(killed)) == 2 and {int(p) for p in killed} <= before
    assert httpx.get(f"{url}/fragile", timeout=60).status_code == 200  # the third replica serves on

    wait_for(lambda: len(running()) == 3, timeout_s=60, what="replacements for the two dead replicas")
    runs.unlink()
    with pytest.raises(Exception, match="died while running this request"):
        handle.die.remote().result()
    # one run where the replica it reached acknowledges requests (the survivor's moving average
    # of a request's time may be over _ACK_AFTER_S after its first request), two where it does
    # not: never more
    assert len(runs.read_text().split()) in (1, 2)
    serve.delete("fragile")


def test_killed_controller_costs_no_request(serve_instance):
    serve, url = serve_instance

    @serve.deployment(num_replicas=2)
    def steady(request) -> str:
        return "steady"

    serve.run(steady.bind(), name="steady", route_prefix="/steady")
    with Load(f"{url}/steady", n=4) as load:
        load.wait_more(50, "requests before the kill")
        raylite.kill(get_controller(), no_restart=False)

        def back() -> bool:
            try:
                return raylite.get(get_controller().ping.remote(), timeout=5)
            except Exception:  # noqa: BLE001 - restarting
                return False

        wait_for(back, timeout_s=30, what="the controller to restart")
        load.wait_more(50, "requests after the restart")
    assert load.failures() == []
    serve.delete("steady")
