"""The scalability envelope on one node: raylite and Ray side by side, case by case.

    python bench/envelope.py                                  # every single-node case, both frameworks
    python bench/envelope.py --cases actors_1k,pgs_1k          # some cases
    python bench/envelope.py --no-ray --cases queued_1m        # raylite only
    python bench/envelope.py --list                            # the cases and their time limits

Each case runs in a fresh interpreter (this script in `--worker FRAMEWORK --case NAME` mode,
under raylite's python or Ray's virtualenv), so no case inherits another's warm state or
leaked memory. The parent watches the worker's whole process tree (driver, daemons, workers)
and records:

- wall time of the case (the worker's own clock, `init()` excluded) and its phases;
- the tree's peak PSS, sampled while it runs (shared pages split between their users, so the
  sum is the real total; a 10,000-process tree takes about a second to sample, so the interval
  adapts to the sampling cost);
- whether the case finished, or was stopped: past its time limit, or past the memory guard
  (`--max-tree-gib`, or the machine's available memory falling under `--min-free-gib`): the
  machine is shared, so a case that would swallow it is stopped, not allowed to run to the OOM
  killer);
- the load average when the case started.

Cases are functions `case_<name>(fw, phase)` below, registered in CASES with a time limit.
The multi-node case (`spread_100k`: 100,000 SPREAD tasks over N nodes) runs on simulated nodes
(bench/head_scale.py) for raylite only; Ray has no simulator (real nodes: bench/netns_nodes.py).

Results: JSON lines on stdout (one per phase and one per finished run), and a Markdown table on
stderr at the end (also written to --table FILE): the table in docs/scale.md comes from it.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import MIB, _smaps_rollup, descendants, emit  # noqa: E402  (this folder is not a package)

DEFAULT_RAY_PYTHON = "/opt/rayvenv/bin/python"
GIB = 1 << 30


# ---------------------------------------------------------------------------------------------
# the cases (worker side): `fw` is the imported framework (raylite or ray)


def case_args_10k(fw, phase: Callable[..., None]) -> None:
    """One task that takes 10,000 ObjectRef arguments."""
    refs = [fw.put(i) for i in range(10_000)]
    phase("put_s")

    @fw.remote
    def count(*values):
        return len(values), sum(values)

    assert fw.get(count.remote(*refs)) == (10_000, sum(range(10_000)))
    phase("task_s")


def _returns(n: int):
    def case(fw, phase: Callable[..., None]) -> None:
        @fw.remote(num_returns=n)
        def many():
            return list(range(n))

        refs = many.remote()
        values = fw.get(refs)
        assert values == list(range(n))
        phase("get_s")

    case.__doc__ = f"One task with num_returns={n:,}, every return fetched."
    return case


def case_get_10k_small(fw, phase: Callable[..., None]) -> None:
    """One get() of 10,000 small lists."""
    refs = [fw.put([i] * 8) for i in range(10_000)]
    phase("put_s")
    values = fw.get(refs)
    assert values[9_999] == [9_999] * 8
    phase("get_s")


def _get_arrays(count: int):
    def case(fw, phase: Callable[..., None]) -> None:
        import numpy as np

        refs = []
        for i in range(count):
            refs.append(fw.put(np.full(MIB, i % 251, dtype=np.uint8)))
        phase("put_s")
        values = fw.get(refs)
        phase("get_s")
        for i in (0, count // 2, count - 1):
            assert values[i][0] == i % 251 and values[i].nbytes == MIB

    case.__doc__ = f"put() {count:,} x 1 MiB arrays, then one get() of all of them."
    return case


def case_queued_1m(fw, phase: Callable[..., None]) -> None:
    """1,000,000 tasks queued while both CPUs are held, then every result fetched."""
    flag = tempfile.mktemp(prefix="envelope-gate-")

    @fw.remote(num_cpus=1)
    def hold(path):
        while not os.path.exists(path):
            time.sleep(0.02)
        return 0

    @fw.remote(num_cpus=1)
    def one():
        return 1

    holders = [hold.remote(flag) for _ in range(2)]
    refs = [one.remote() for _ in range(1_000_000)]
    phase("submit_s")
    pss, _n = tree_pss(os.getpid())
    phase("queued_tree", value=pss / MIB, unit="MiB")
    with open(flag, "w"):
        pass
    try:
        assert sum(fw.get(refs)) == 1_000_000
        fw.get(holders)
    finally:
        os.unlink(flag)
    phase("run_and_get_s")


def _actors(count: int):
    def case(fw, phase: Callable[..., None]) -> None:
        @fw.remote(num_cpus=0)
        class Cell:
            def ping(self):
                return os.getpid()

        base, _n = tree_pss(os.getpid())
        actors = [Cell.remote() for _ in range(count)]
        phase("create_s")
        pids = fw.get([a.ping.remote() for a in actors])
        assert len(set(pids)) == count
        phase("all_ready_s")
        pss, processes = tree_pss(os.getpid())
        phase("pss_per_actor", value=(pss - base) / count / MIB, unit="MiB", processes=processes)
        for a in actors:
            fw.kill(a)
        phase("kill_s")

    case.__doc__ = f"{count:,} actors (num_cpus=0) alive at once: create, call each once, kill."
    return case


def case_pgs_1k(fw, phase: Callable[..., None]) -> None:
    """1,000 placement groups created, waited for, and removed."""
    from importlib import import_module

    pgmod = import_module(f"{fw.__name__}.util.placement_group")
    groups = [pgmod.placement_group([{"CPU": 0.001}]) for _ in range(1_000)]
    phase("create_s")
    fw.get([g.ready() for g in groups])
    phase("ready_s")
    for g in groups:
        pgmod.remove_placement_group(g)
    phase("remove_s")


def case_spread_100k(fw, phase: Callable[..., None]) -> None:
    """100,000 SPREAD tasks over N simulated nodes (ENVELOPE_SPREAD_NODES, default 100)."""
    if fw.__name__ != "raylite":
        raise Skip("Ray has no node simulator; real nodes side by side: bench/netns_nodes.py")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from head_scale import tasks_spread_over_simulated_nodes

    fw.shutdown()  # the simulated cluster brings its own head
    phase("setup_s")
    out = tasks_spread_over_simulated_nodes(int(os.environ.get("ENVELOPE_SPREAD_NODES", "100")))
    if out["nodes_used"] < out["nodes"]:
        raise RuntimeError(f"SPREAD reached {out['nodes_used']} of {out['nodes']} nodes")
    phase("spread_s")


def _warm_up() -> int:
    return 0


class Skip(Exception):
    pass


def tree_pss(root: int) -> tuple[int, int]:
    """(PSS bytes, processes) of `root` and everything below it. A process that exits while
    we read it is left out (falling back to its RSS would count shared pages once per process)."""
    total = count = 0
    for pid in descendants(root):
        values = _smaps_rollup(pid)
        if values is not None:
            total += values["Pss"]
            count += 1
    return total, count


@dataclass(frozen=True)
class Case:
    name: str
    fn: Callable
    limit_s: float  # per framework run
    init: dict  # extra init() arguments
    heavy: bool = False  # run only when named (loads the shared machine for minutes)


CASES = {c.name: c for c in [
    Case("args_10k", case_args_10k, 300, {}),
    Case("returns_3k", _returns(3_000), 300, {}),
    Case("returns_10k", _returns(10_000), 300, {}),
    Case("get_10k_small", case_get_10k_small, 300, {}),
    Case("spill_2k_1gib", _get_arrays(2_000), 300, {"object_store_memory": GIB}),
    Case("get_10k_1mib", _get_arrays(10_000), 900, {}, heavy=True),
    Case("queued_1m", case_queued_1m, 1200, {}, heavy=True),
    Case("actors_1k", _actors(1_000), 300, {}),
    Case("actors_10k", _actors(10_000), 1200, {}, heavy=True),
    Case("pgs_1k", case_pgs_1k, 300, {}),
    Case("spread_100k", case_spread_100k, 600, {}, heavy=True),
]}


def run_case(framework: str, name: str) -> None:
    """Worker mode: init, run one case, report phases and the total, shut down."""
    case = CASES[name]
    fw = importlib.import_module(framework)
    kwargs = {"num_cpus": 2, "include_dashboard": False, **case.init}
    if framework == "ray":
        kwargs["log_to_driver"] = False
    start = time.perf_counter()
    fw.init(**kwargs)
    emit({"case": name, "framework": framework, "phase": "init_s", "value": time.perf_counter() - start})
    # a few tasks first, and a second to settle, on both sides: the case measures itself,
    # not the workers' first start or the daemons' start-up work still running
    warm = fw.remote(_warm_up)
    fw.get([warm.remote() for _ in range(4)])
    time.sleep(1.0)
    last = [time.perf_counter()]
    t0 = last[0]

    def phase(label: str, value: float | None = None, unit: str = "s", **extra: object) -> None:
        now = time.perf_counter()
        record = {"case": name, "framework": framework, "phase": label, "unit": unit,
                  "value": now - last[0] if value is None else value, **extra}
        emit(record)
        if value is None:
            last[0] = now

    try:
        case.fn(fw, phase)
    except Skip as e:
        emit({"case": name, "framework": framework, "skipped": str(e)})
        fw.shutdown()
        return
    wall = time.perf_counter() - t0
    pss, processes = tree_pss(os.getpid())  # a short case may end between two samples of the parent
    emit({"case": name, "framework": framework, "wall_s": wall, "end_tree_mib": pss / MIB,
          "end_processes": processes})
    fw.shutdown()


# ---------------------------------------------------------------------------------------------
# the parent: one fresh process per case and framework, watched


@dataclass
class Outcome:
    case: str
    framework: str
    status: str  # finished | timeout | memory guard | failed (...) | skipped
    wall_s: float | None
    peak_pss_mib: float
    peak_processes: int
    load: str
    phases: dict


def _become_subreaper() -> None:
    """Orphans of a killed case (daemons whose driver died) become our children, so the
    watcher still sees them and kills them; Linux only."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 1 << 62


def _kill_tree(root: int) -> None:
    for pid in reversed(descendants(root)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _kill_orphans() -> None:
    """Children we inherited as subreaper (a killed case's daemons), and theirs."""
    me = os.getpid()
    for pid in descendants(me):
        if pid != me:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def watch(framework: str, python: str, name: str, args: argparse.Namespace) -> Outcome:
    case = CASES[name]
    limit_s = args.timeout or case.limit_s
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    env = dict(os.environ, PYTHONUNBUFFERED="1", RAY_USAGE_STATS_ENABLED="0")
    if framework != "raylite":
        env.pop("PYTHONPATH", None)
    cmd = [python, os.path.abspath(__file__), "--worker", framework, "--case", name]
    errors = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errors, text=True, env=env)
    peak = [0, 0]
    stop = threading.Event()
    why: list[str] = []

    def sampler() -> None:
        started = time.monotonic()
        while not stop.is_set():
            t = time.monotonic()
            total, processes = tree_pss(proc.pid)
            cost = time.monotonic() - t
            peak[0] = max(peak[0], total)
            peak[1] = max(peak[1], processes)
            if total > args.max_tree_gib * GIB or _mem_available() < args.min_free_gib * GIB:
                why.append(f"memory guard ({total / GIB:.1f} GiB in {processes} processes, "
                           f"{_mem_available() / GIB:.1f} GiB free)")
                _kill_tree(proc.pid)
                return
            if t - started > limit_s:
                why.append(f"timeout ({limit_s:.0f} s)")
                _kill_tree(proc.pid)
                return
            stop.wait(max(0.25, 2 * cost))

    watcher = threading.Thread(target=sampler, daemon=True)
    watcher.start()
    phases: dict = {}
    wall = None
    skipped = ""
    for line in proc.stdout:
        line = line.strip()
        if not line.startswith("{"):
            continue
        print(line, flush=True)
        record = json.loads(line)
        if "phase" in record:
            phases[record["phase"]] = record["value"]
        if "wall_s" in record:
            wall = record["wall_s"]
            peak[0] = max(peak[0], int(record["end_tree_mib"] * MIB))
            peak[1] = max(peak[1], record["end_processes"])
        if "skipped" in record:
            skipped = record["skipped"]
    code = proc.wait()
    stop.set()
    watcher.join()
    _kill_tree(proc.pid)
    _kill_orphans()
    if skipped:
        status = "skipped"
    elif why:
        status = why[0]
    elif code != 0 or wall is None:
        errors.seek(0)
        tail = errors.read().decode(errors="replace").strip().splitlines()[-1:] or [f"exit {code}"]
        status = f"failed ({tail[0][:160]})"
    else:
        status = "finished"
    if status.startswith("failed"):
        errors.seek(0)
        print(f"--- {framework} {name} stderr (tail) ---\n{errors.read().decode(errors='replace')[-3000:]}",
              file=sys.stderr)
    errors.close()
    outcome = Outcome(name, framework, status, wall, peak[0] / MIB, peak[1], load, phases)
    emit({"case": name, "framework": framework, "status": status, "wall_s": wall,
          "peak_pss_mib": round(outcome.peak_pss_mib, 1), "peak_processes": peak[1], "load": load,
          "phases": phases})
    return outcome


def _fmt_s(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 100 else f"{v:.0f}"


def _cell(o: Outcome | None) -> str:
    if o is None:
        return "not run"
    if o.status == "skipped":
        return "skipped"
    mem = f"{o.peak_pss_mib:,.0f} MiB"
    if o.status == "finished":
        return f"{_fmt_s(o.wall_s)} s, {mem}"
    return f"{o.status}; peak {mem}"


def _ratio(ours: Outcome | None, theirs: Outcome | None) -> str:
    if ours is None or theirs is None or ours.status != "finished":
        return ""
    if theirs.status != "finished":
        return "Ray did not finish"
    t = theirs.wall_s / ours.wall_s if ours.wall_s else 0
    m = theirs.peak_pss_mib / ours.peak_pss_mib if ours.peak_pss_mib else 0
    return f"{t:.1f}x faster, {m:.1f}x less memory"


def table(outcomes: list[Outcome]) -> str:
    by = {(o.case, o.framework): o for o in outcomes}
    names = [n for n in CASES if any(o.case == n for o in outcomes)]
    rows = [["case", "raylite (wall, peak PSS)", "Ray 2.60 (wall, peak PSS)", "raylite vs Ray", "load at start"]]
    for n in names:
        ours, theirs = by.get((n, "raylite")), by.get((n, "ray"))
        rows.append([n, _cell(ours), _cell(theirs), _ratio(ours, theirs),
                     " / ".join(o.load for o in (ours, theirs) if o is not None)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in rows]
    out.insert(1, "| " + " | ".join("-" * w for w in widths) + " |")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--case", help=argparse.SUPPRESS)
    p.add_argument("--cases", default="", help="comma-separated case names (default: every light case)")
    p.add_argument("--all", action="store_true", help="also the heavy cases (minutes each, GiBs of memory)")
    p.add_argument("--no-ray", action="store_true")
    p.add_argument("--no-raylite", action="store_true")
    p.add_argument("--ray-python", default=DEFAULT_RAY_PYTHON)
    p.add_argument("--timeout", type=float, default=0, help="seconds per run (default: the case's own)")
    p.add_argument("--max-tree-gib", type=float, default=14.0, help="stop a run whose tree PSS passes this")
    p.add_argument("--min-free-gib", type=float, default=2.0, help="stop a run when the machine has less free")
    p.add_argument("--table", default="", help="also write the Markdown table to this file")
    p.add_argument("--list", action="store_true")
    args = p.parse_args()
    if args.worker:
        run_case(args.worker, args.case)
        return
    if args.list:
        for c in CASES.values():
            print(f"{c.name:15} {c.limit_s:6.0f} s{'  heavy' if c.heavy else '       '}  {c.fn.__doc__}")
        return
    names = [n.strip() for n in args.cases.split(",") if n.strip()] or \
        [n for n, c in CASES.items() if args.all or not c.heavy]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        p.error(f"unknown case(s) {', '.join(unknown)}; --list shows them")
    runners = []
    if not args.no_raylite:
        runners.append(("raylite", sys.executable))
    if not args.no_ray and os.path.exists(args.ray_python):
        runners.append(("ray", args.ray_python))
    _become_subreaper()
    outcomes = []
    for name in names:
        for framework, python in runners:
            outcomes.append(watch(framework, python, name, args))
    text = table(outcomes)
    print(text, file=sys.stderr)
    if args.table:
        with open(args.table, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
