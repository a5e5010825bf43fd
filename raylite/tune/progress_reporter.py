"""The terminal view of a run, laid out as Ray Tune prints it: the experiment's set-up, then
'Trial status: 3 RUNNING | 1 TERMINATED' with the resources in use and a table of trials
(name, status, the searched parameters, iterations, time and the metrics)."""

from __future__ import annotations

import datetime
import sys
import time
from numbers import Number
from typing import Any, TextIO

_SKIP = {"config", "trial_id", "experiment_tag", "date", "timestamp", "pid", "hostname",
         "node_ip", "done", "time_this_iter_s", "iterations_since_restore",
         "time_since_restore", "checkpoint_dir_name", "training_iteration", "time_total_s"}


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.5g}"
    return str(value)


def _box(rows: list[list[str]], header: list[str] | None = None) -> str:
    table = ([header] if header else []) + rows
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    line = lambda r: "│ " + "  ".join(c.ljust(w) for c, w in zip(r, widths)) + " │"  # noqa: E731
    width = sum(widths) + 2 * (len(widths) - 1) + 2
    out = ["╭" + "─" * width + "╮"]
    if header:
        out += [line(header), "├" + "─" * width + "┤"]
    out += [line(r) for r in rows]
    out.append("╰" + "─" * width + "╯")
    return "\n".join(out)


class TuneReporter:
    """Prints the run's status at start, every `interval_s` while it runs, and at the end
    (verbose 0: nothing; 1: status tables; 2: also a line per result)."""

    def __init__(self, experiment_name: str, experiment_path: str, verbose: int = 1,
                 interval_s: float = 5.0, metric: str | None = None,
                 out: TextIO | None = None) -> None:
        self._name, self._path = experiment_name, experiment_path
        self._verbose = 1 if verbose is None else verbose
        self._interval_s = interval_s
        self._metric = metric
        self._out = out or sys.stdout
        self._start = time.monotonic()
        self._last = 0.0

    def start(self, search_alg: Any, scheduler: Any, num_samples: int) -> None:
        if self._verbose < 1:
            return
        rows = [["Search algorithm", type(search_alg).__name__],
                ["Scheduler", type(scheduler).__name__],
                ["Number of trials", str(num_samples)]]
        header = ["Configuration for experiment", self._name]
        print(_box(rows, header), file=self._out)
        print(f"\nView detailed results here: {self._path}", file=self._out, flush=True)

    def result(self, trial: Any, result: dict) -> None:
        if self._verbose >= 2:
            shown = {k: _fmt(v) for k, v in result.items()
                     if k not in _SKIP and isinstance(v, (Number, str))}
            print(f"Trial {trial} finished iteration {result.get('training_iteration')}: "
                  f"{shown}", file=self._out, flush=True)

    def maybe_print(self, trials: list, resources: str = "", force: bool = False) -> None:
        now = time.monotonic()
        if self._verbose < 1 or (not force and now - self._last < self._interval_s):
            return
        self._last = now
        print(self.status_text(trials, resources), file=self._out, flush=True)

    def status_text(self, trials: list, resources: str = "") -> str:
        counts: dict[str, int] = {}
        for t in trials:
            counts[t.status] = counts.get(t.status, 0) + 1
        status = " | ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        elapsed = time.monotonic() - self._start
        lines = [f"\nTrial status: {status or '0 trials'}",
                 f"Current time: {datetime.datetime.now():%Y-%m-%d %H:%M:%S}. "
                 f"Total running time: {elapsed:.0f}s"]
        if resources:
            lines.append(f"Logical resource usage: {resources}")
        if trials:
            lines.append(self._table(trials))
        return "\n".join(lines)

    def _table(self, trials: list, max_rows: int = 20) -> str:
        params = sorted({k for t in trials for k in t.evaluated_params})[:6]
        metrics: list[str] = []
        for t in trials:
            for k, v in t.last_result.items():
                if k not in _SKIP and isinstance(v, Number) and k not in metrics:
                    metrics.append(k)
        if self._metric and self._metric in metrics:
            metrics.remove(self._metric)
            metrics.insert(0, self._metric)
        metrics = metrics[:4]
        header = ["Trial name", "status", *params, "iter", "total time (s)", *metrics]
        rows = []
        shown = trials if len(trials) <= max_rows else trials[:max_rows]
        for t in shown:
            r = t.last_result
            rows.append([str(t), t.status, *(_fmt(t.evaluated_params.get(p, "")) for p in params),
                         _fmt(r.get("training_iteration", "")),
                         _fmt(r.get("time_total_s", "")) if r else "",
                         *(_fmt(r.get(m, "")) for m in metrics)])
        text = _box(rows, header)
        if len(trials) > max_rows:
            text += f"\n... {len(trials) - max_rows} more trials not shown"
        return text

    def end(self, trials: list) -> None:
        if self._verbose < 1:
            return
        print(self.status_text(trials), file=self._out)
        print(f"\nExperiment {self._name} finished ({len(trials)} trials). Results are in "
              f"{self._path}", file=self._out, flush=True)


class ProgressReporter:
    """Ray's base class for custom reporters (accepted by RunConfig(progress_reporter=...))."""

    def should_report(self, trials: list, done: bool = False) -> bool:
        return True

    def report(self, trials: list, done: bool, *sys_info: Any) -> None:
        raise NotImplementedError


class CLIReporter(ProgressReporter):
    """Prints the status table to the terminal (the default in a terminal)."""

    def __init__(self, metric_columns: Any = None, parameter_columns: Any = None,
                 max_report_frequency: int = 5, metric: str | None = None, **kwargs: Any) -> None:
        self._reporter = TuneReporter("", "", 1, float(max_report_frequency), metric)

    def report(self, trials: list, done: bool, *sys_info: Any) -> None:
        print(self._reporter.status_text(trials))


JupyterNotebookReporter = CLIReporter
