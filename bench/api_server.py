"""What the head's HTTP API server costs: init() with it on and off, and its memory.

    python bench/api_server.py [--rounds 5]

Interleaved fresh interpreters (on, off, off, on, ...): init() time with the default
(server bound, started on first use) and with include_dashboard=False; then, with it on,
the time of the first request (the server process starts) and the process tree's PSS/RSS
before and after, i.e. what a running server adds. Issue 13's budget: init() at most 50 ms
slower and the tree at most 50 MiB larger with the server on.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import MIB, tree_memory  # noqa: E402,F401  (the worker imports it too)

WORKER = r"""
import json, os, sys, time, urllib.request
sys.path.insert(0, sys.argv[2])
from _common import MIB, tree_memory
import raylite
on = sys.argv[1] == "on"
start = time.perf_counter()
ctx = raylite.init(num_cpus=2, **({} if on else {"include_dashboard": False}))
out = {"init_s": time.perf_counter() - start}
if on:
    time.sleep(1.0)
    before = tree_memory(os.getpid())
    req = urllib.request.Request("http://" + ctx.dashboard_url + "/api/version")
    req.add_header("Authorization", "Bearer " + open(os.path.join(ctx["session_dir"], "token")).read().strip())
    start = time.perf_counter()
    urllib.request.urlopen(req, timeout=60).read()
    out["first_request_ms"] = (time.perf_counter() - start) * 1e3
    time.sleep(1.0)
    after = tree_memory(os.getpid())
    out["pss_added_mib"] = (after.pss_bytes - before.pss_bytes) / MIB
    out["rss_added_mib"] = (after.rss_bytes - before.rss_bytes) / MIB
print(json.dumps(out))
raylite.shutdown()
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    runs: dict[str, list[dict]] = {"on": [], "off": []}
    for i in range(args.rounds):
        for mode in ("on", "off") if i % 2 == 0 else ("off", "on"):
            out = subprocess.run([sys.executable, "-c", WORKER, mode, here], capture_output=True, text=True,
                                 timeout=300)
            if out.returncode != 0:
                raise RuntimeError(out.stderr[-2000:])
            runs[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(json.dumps({"round": i, "mode": mode, **runs[mode][-1]}), flush=True)

    def med(mode: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[mode])

    on, off = med("on", "init_s"), med("off", "init_s")
    print(f"init() with the API server {on * 1e3:.0f} ms, without {off * 1e3:.0f} ms: "
          f"{(on - off) * 1e3:+.0f} ms", file=sys.stderr)
    print(f"first request (starts the server) {med('on', 'first_request_ms'):.0f} ms; a running server adds "
          f"PSS {med('on', 'pss_added_mib'):.1f} MiB, RSS {med('on', 'rss_added_mib'):.1f} MiB "
          f"(load average {os.getloadavg()[0]:.1f})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
