"""The autoscaler's loop: read the head's demand, ask the policy, act through a provider.

One `update()` is one round: what the head reports (nodes, idle seconds, waiting requests,
unplaced placement groups, the standing request_resources()) is joined with what the provider
has made, the pure policy (policy.py) decides, and the provider launches and terminates. The
round's view is published to the head (`raylite.util.state.publish_autoscaler_view`): while it
is there, requests that only a launchable node type fits stay pending instead of failing, and
`raylite status` shows the pending launches, idle nodes and demands no node type can meet.
Only the public raylite API is used; the head is reached through `address` like the CLI does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from raylite.autoscaler.policy import (
    Config,
    Decision,
    Demand,
    PlacementGroupDemand,
    WorkerNode,
    decide,
)
from raylite.autoscaler.providers.base import NodeProvider, ProviderNode
from raylite.util.state import get_cluster_demand, publish_autoscaler_view

log = logging.getLogger("raylite.autoscaler")

DEFAULT_IDLE_TIMEOUT_S = 60.0


class Autoscaler:
    """Drives one provider from one head. `read_demand`/`publish` are seams for tests."""

    def __init__(self, provider: NodeProvider, *, address: str | None = None,
                 idle_timeout_s: float | None = None, upscaling_speed: float | None = None,
                 read_demand: Callable[[str | None], dict[str, Any]] = get_cluster_demand,
                 publish: Callable[[dict[str, Any] | None, str | None], None] = publish_autoscaler_view) -> None:
        self.provider = provider
        self.address = address
        self._idle_timeout_s = idle_timeout_s
        self.upscaling_speed = upscaling_speed
        self._read_demand = read_demand
        self._publish = publish
        self.last_decision = Decision()

    def config(self) -> Config:
        idle = self._idle_timeout_s
        if idle is None:
            idle = self.provider.idle_timeout_s()
        speed = self.upscaling_speed
        if speed is None:
            speed = float(getattr(self.provider, "upscaling_speed", lambda: 1.0)())
        return Config(list(self.provider.node_types()), DEFAULT_IDLE_TIMEOUT_S if idle is None else idle, speed)

    def update(self) -> Decision:
        """One round; returns what it decided (and carried out)."""
        refresh = getattr(self.provider, "refresh", None)
        if refresh is not None:
            refresh()  # read the provider's state once per round
        config = self.config()
        state = self._read_demand(self.address)
        pnodes = self.provider.non_terminated_nodes()
        workers, unmanaged = _join(pnodes, [n for n in state["nodes"] if n["alive"]], self.provider)
        d = state["demands"]
        waiting = [*d.get("waiting", []), *d.get("actors", [])]
        for n in state["nodes"]:
            if n["alive"]:
                waiting.extend(n.get("pending") or [])
        demand = Demand(waiting, [PlacementGroupDemand(pg["bundles"], pg["strategy"])
                                  for pg in d.get("placement_groups", [])],
                        d.get("requested", []), unmanaged)
        ready = self.provider.ready()
        decision = decide(config, workers, demand) if ready else Decision()
        if decision.terminate:
            log.info("terminating idle nodes %s", decision.terminate)
            self.provider.terminate_nodes(decision.terminate)
        for name, count in sorted(decision.launch.items()):
            if count > 0:
                log.info("launching %d node(s) of type %s", count, name)
                self.provider.create_nodes(name, count)
        self.last_decision = decision
        self._publish(_view(config, workers, decision, ready), self.address)
        return decision

    def run(self, interval_s: float = 1.0, stop: threading.Event | None = None,
            rounds: int | None = None) -> None:
        """Rounds every `interval_s` until `stop` is set (errors of one round are logged, and
        the next round tries again: the head or the provider's API may be briefly away)."""
        stop = stop or threading.Event()
        done = 0
        while not stop.is_set() and (rounds is None or done < rounds):
            try:
                self.update()
            except Exception as e:  # noqa: BLE001
                log.warning("autoscaler round failed (trying again in %gs): %s", interval_s, e)
            done += 1
            stop.wait(interval_s)

    def close(self) -> None:
        """Withdraw the published view: requests no node fits fail again, as without an autoscaler."""
        try:
            self._publish(None, self.address)
        except Exception:  # noqa: BLE001  the head is already gone
            pass


def _join(pnodes: list[ProviderNode], alive: list[Mapping[str, Any]],
          provider: NodeProvider) -> tuple[list[WorkerNode], list[tuple[dict, dict]]]:
    """Provider nodes as the policy's WorkerNodes (running once a raylite node matches), and the
    alive raylite nodes no provider node claims (the head, nodes started by hand)."""
    claimed: set[str] = set()
    workers = []
    for p in pnodes:
        match = next((n for n in alive if n["node_id"] not in claimed and not n.get("is_head")
                      and provider.matches(p, n)), None)
        if match is None:
            workers.append(WorkerNode(p.node_id, p.node_type, "launching"))
            continue
        claimed.add(match["node_id"])
        workers.append(WorkerNode(p.node_id, p.node_type, "running", dict(match["available"]),
                                  dict(match["total"]), float(match.get("idle_s", 0.0))))
    unmanaged = [(dict(n["available"]), dict(n["total"])) for n in alive if n["node_id"] not in claimed]
    return workers, unmanaged


def _view(config: Config, workers: list[WorkerNode], decision: Decision, ready: bool) -> dict[str, Any]:
    launching = sum(1 for w in workers if w.status == "launching") + sum(decision.launch.values())
    return {
        "time": time.time(),
        "node_types": {t.name: {"resources": dict(t.resources), "min_workers": t.min_workers,
                                "max_workers": t.max_workers} for t in config.node_types},
        "idle_timeout_s": config.idle_timeout_s,
        "launching": launching,
        "pending_launches": {**{w.node_type: 0 for w in workers if w.status == "launching"},
                             **_count_launching(workers, decision)},
        "workers": [{"node_id": w.node_id, "node_type": w.node_type, "status": w.status,
                     "idle_s": round(w.idle_s, 1)} for w in workers],
        "terminating": list(decision.terminate),
        "infeasible": [{"demand": d, "reason": why} for d, why in decision.infeasible],
        "capped": [{"demand": d, "reason": why} for d, why in decision.capped],
        "provider_busy": not ready,
    }


def _count_launching(workers: list[WorkerNode], decision: Decision) -> dict[str, int]:
    out: dict[str, int] = {}
    for w in workers:
        if w.status == "launching":
            out[w.node_type] = out.get(w.node_type, 0) + 1
    for name, n in decision.launch.items():
        out[name] = out.get(name, 0) + n
    return out
