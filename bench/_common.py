"""Helpers shared by the benchmarks: timing, process-tree memory, JSON lines, the results table.

Standard library only: this module is imported by every interpreter a benchmark runs under
(raylite's, and Ray's virtualenv, which may lack psutil), so it reads memory from /proc on
Linux and falls back to psutil (RSS only) elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

MIB = 1024 * 1024


def emit(record: dict) -> None:
    """Print one JSON line on stdout and flush it, so a parent process sees it at once."""
    sys.stdout.write(json.dumps(record, sort_keys=True) + "\n")
    sys.stdout.flush()


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def sample(fn: Callable[[], object], count: int, max_s: float) -> list[float]:
    """Time `fn()` up to `count` times, stopping early once `max_s` seconds have passed."""
    times: list[float] = []
    deadline = time.perf_counter() + max_s
    for _ in range(count):
        start = time.perf_counter()
        fn()
        end = time.perf_counter()
        times.append(end - start)
        if end > deadline:
            break
    return times


# ---------------------------------------------------------------------------------------------
# memory of a process tree


def descendants(root_pid: int) -> list[int]:
    """`root_pid` and every live process below it (children, grandchildren, ...)."""
    if not os.path.isdir("/proc"):
        return _descendants_psutil(root_pid)
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # the command name sits in parentheses and may itself contain spaces or parentheses
        fields = stat[stat.rfind(b")") + 2:].split()
        if fields[0] == b"Z":
            continue  # a zombie holds no memory
        children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [root_pid]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def _descendants_psutil(root_pid: int) -> list[int]:
    import psutil

    root = psutil.Process(root_pid)
    return [root_pid] + [p.pid for p in root.children(recursive=True)]


@dataclass
class TreeMemory:
    processes: int
    rss_bytes: int
    uss_bytes: int | None  # private pages only: what killing the tree would free
    pss_bytes: int | None  # shared pages split between their users: sums to the real total


def tree_memory(root_pid: int) -> TreeMemory:
    pids = descendants(root_pid)
    rss = uss = pss = 0
    have_detail = True
    counted = 0
    for pid in pids:
        detail = _smaps_rollup(pid)
        if detail is None:
            have_detail = False
            value = _rss_only(pid)
            if value is None:
                continue  # exited while we looked
            rss += value
        else:
            rss += detail["Rss"]
            pss += detail["Pss"]
            uss += detail["Private_Clean"] + detail["Private_Dirty"]
        counted += 1
    if not have_detail:
        return TreeMemory(counted, rss, None, None)
    return TreeMemory(counted, rss, uss, pss)


def _smaps_rollup(pid: int) -> dict[str, int] | None:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            lines = f.readlines()
    except OSError:
        return None
    values: dict[str, int] = {}
    for line in lines[1:]:
        name, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB":
            values[name] = int(parts[0]) * 1024
    if not {"Rss", "Pss", "Private_Clean", "Private_Dirty"} <= values.keys():
        return None
    return values


def _rss_only(pid: int) -> int | None:
    try:
        import psutil

        return int(psutil.Process(pid).memory_info().rss)
    except Exception:  # noqa: BLE001  (psutil missing, or the process is gone)
        try:
            with open(f"/proc/{pid}/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return None


# ---------------------------------------------------------------------------------------------
# the side-by-side table


@dataclass(frozen=True)
class Metric:
    name: str
    label: str
    unit: str
    lower_is_better: bool
    target: float | None = None  # the target, when it sets one

    def meets(self, value: float) -> bool | None:
        if self.target is None:
            return None
        return value <= self.target if self.lower_is_better else value >= self.target

    def target_text(self) -> str:
        if self.target is None:
            return ""
        return f"{'<=' if self.lower_is_better else '>='} {format_value(self.target)}"


def format_value(value: float | None) -> str:
    if value is None:
        return "n/a"
    if float(value).is_integer() and abs(value) < 1000:
        return str(int(value))
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def advantage(metric: Metric, ours: float | None, theirs: float | None) -> str:
    """How many times better `ours` is than `theirs` (above 1 means ours is better)."""
    if ours is None or theirs is None or ours <= 0 or theirs <= 0:
        return ""
    ratio = theirs / ours if metric.lower_is_better else ours / theirs
    return f"{ratio:.1f}x" if ratio < 100 else f"{ratio:,.0f}x"


def render_table(metrics: Iterable[Metric], results: dict[str, dict[str, float]],
                 frameworks: Sequence[str]) -> str:
    """A Markdown table: one row per metric, one column per framework, target, ratio."""
    frameworks = list(frameworks)
    ours = frameworks[0]
    header = ["metric", "target", *frameworks]
    if len(frameworks) > 1:
        header.append(f"{ours} advantage")
    rows = [header, ["---"] * len(header)]
    for metric in metrics:
        values = [results.get(fw, {}).get(metric.name) for fw in frameworks]
        if all(v is None for v in values):
            continue
        cells = [f"{metric.label} ({metric.unit})", metric.target_text()]
        for index, value in enumerate(values):
            text = format_value(value)
            met = metric.meets(value) if (index == 0 and value is not None) else None
            if met is not None:
                text += " ok" if met else " MISS"
            cells.append(text)
        if len(frameworks) > 1:
            cells.append(advantage(metric, values[0], values[1]))
        rows.append(cells)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for row in rows:
        if row[0] == "---":
            row = ["-" * w for w in widths]
        lines.append("| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths)) + " |")
    return "\n".join(lines)


def collect_worker_metrics(module_name: str, cmd: list[str], metric_names: set[str] | dict,
               timeout_s: float) -> dict[str, float]:
    """Run one framework's measuring subprocess; echo its JSON lines and collect its metrics.

    Ray's side gets no raylite PYTHONPATH and no usage-stats calls. A worker that runs past
    `timeout_s` is killed with every process it started (its cluster may not stop itself).
    """
    import signal
    import subprocess
    import tempfile
    import threading

    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no network calls from the Ray side
    if module_name != "raylite":
        env.pop("PYTHONPATH", None)  # keep raylite's paths out of the other interpreter

    def kill_tree(pid: int) -> None:
        for child in reversed(descendants(pid)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)

    results: dict[str, float] = {}
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errors, text=True, env=env)
        watchdog = threading.Timer(timeout_s, kill_tree, (proc.pid,))
        watchdog.start()
        try:
            for line in proc.stdout:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                print(line, flush=True)
                record = json.loads(line)
                if record.get("metric") in metric_names:
                    results[record["metric"]] = record["value"]
            code = proc.wait()
        finally:
            watchdog.cancel()
        if code != 0:
            errors.seek(0)
            tail = errors.read().decode(errors="replace")[-3000:]
            why = f"was stopped after {timeout_s:.0f} s" if code < 0 else f"exited with {code}"
            print(f"bench: the {module_name} worker {why}:\n{tail}", file=sys.stderr)
            emit({"framework": module_name, "metric": "error", "exit_code": code})
    return results


@contextlib.contextmanager
def section(framework: str, name: str):
    """Report a failed group of measurements as an error line and go on with the next group."""
    try:
        yield
    except Exception as e:  # noqa: BLE001
        emit({"framework": framework, "metric": "error", "section": name,
              "error": f"{type(e).__name__}: {e}"[:2000]})

