"""What the dashboard shows of a Tune experiment, published to the cluster's KV store.

The runner (the controller's I/O shell) tells the feed about every result and, once per loop
step, offers it the trials; the feed writes one JSON document under namespace "tune", key
"experiment:<name>", at most once per `PUBLISH_INTERVAL_S` (one more second per 100 kB, so a
big experiment does not flood the head's KV store, which may persist every write), and once
more when the experiment ends. The dashboard's Tune page reads it: the experiments, each
one's trials (status, config, last metrics, best value) and a chart of the metric per trial.

The document is bounded: at most `MAX_TRIALS` trials (a larger experiment keeps its best
`MAX_BEST` trials, the unfinished ones and then the newest; `trials_left_out` says how many it
dropped), at most `MAX_POINTS` chart points per trial (a longer history is thinned evenly, so
the chart still spans the whole trial), and short config and metric values. Values are plain
JSON (config objects become their repr), so the page can show any user's config.

It uses only the public KV API and does nothing when the process is not connected to a
cluster. A failed write never touches the experiment. Recording a result costs one list
append; the document is built only when it is written, and with `background=True` (as Tune
runs it) the write itself, a round trip to the head, happens on a thread of its own: the
runner's loop never waits for the head, except for the last write, which fit() waits for so
the page shows the end as soon as fit() returns.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from raylite.tune.experiment.trial import Trial
from raylite.tune.search.search_generator import SearchGenerator
from raylite.tune.search.searcher import Searcher

NAMESPACE = "tune"
KEY_PREFIX = "experiment:"
PUBLISH_INTERVAL_S = 1.0
MAX_TRIALS = 1000
MAX_BEST = 100  # of a larger experiment, the best trials are always kept
MAX_POINTS = 200
MAX_VALUES = 30  # config keys and metrics per trial
MAX_TEXT = 200  # characters of one string value

# keys every result carries (Tune adds them); the page shows only what the trainable reported
AUTO_KEYS = frozenset({
    "trial_id", "experiment_tag", "time_this_iter_s", "time_total_s", "timestamp", "date", "pid",
    "hostname", "node_ip", "done", "iterations_since_restore", "time_since_restore",
    "checkpoint_dir_name", "config", "training_iteration", "should_checkpoint"})


def _default_put(key: str, value: bytes) -> None:
    from raylite.experimental import internal_kv as kv

    if kv._internal_kv_initialized():
        kv._internal_kv_put(key, value, namespace=NAMESPACE)


class _BackgroundPut:
    """Writes the newest document on a daemon thread (an older one not yet written is
    dropped); close() drops what waits, lets the write under way finish and ends the thread."""

    def __init__(self, put: Callable[[str, bytes], None]) -> None:
        self._put = put
        self._cv = threading.Condition()
        self._pending: tuple[str, bytes] | None = None
        self._closed = False
        self._thread: threading.Thread | None = None

    def __call__(self, key: str, value: bytes) -> None:
        with self._cv:
            if self._closed:
                return
            self._pending = (key, value)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="raylite-tune-feed",
                                                daemon=True)
                self._thread.start()
            self._cv.notify()

    def _loop(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._pending is not None or self._closed)
                if self._pending is None:
                    return
                (key, value), self._pending = self._pending, None
            try:
                self._put(key, value)
            except Exception:  # noqa: BLE001 - the dashboard feed never fails an experiment
                pass

    def close(self, timeout_s: float = 10.0) -> None:
        with self._cv:
            self._closed, self._pending = True, None
            self._cv.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout_s)


class _History:
    """A trial's chart points [iteration, value], thinned evenly to stay under MAX_POINTS:
    every `stride`-th result is kept (the first always), the stride doubles each time the
    list fills up, and the latest result is always the last point."""

    __slots__ = ("points", "stride", "seen", "last")

    def __init__(self) -> None:
        self.points: list[list[float]] = []
        self.stride = 1
        self.seen = 0
        self.last: list[float] | None = None

    def add(self, x: float, y: float) -> None:
        point = [x, y]
        self.last = point
        if self.seen % self.stride == 0:
            self.points.append(point)
            if len(self.points) >= MAX_POINTS:
                del self.points[1::2]
                self.stride *= 2
        self.seen += 1

    def plain(self) -> list[list[float]]:
        if self.last is not None and (not self.points or self.points[-1] is not self.last):
            return [*self.points, self.last]
        return list(self.points)


class ExperimentFeed:
    """One experiment's trials for the dashboard; see the module docstring."""

    def __init__(self, name: str, *, metric: str | None = None, mode: str | None = None,
                 scheduler: str = "", searcher: str = "", storage_path: str = "",
                 put: Callable[[str, bytes], None] = _default_put,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time, background: bool = False) -> None:
        self._put = put
        self._background = _BackgroundPut(put) if background else None
        self._clock = clock
        self._wall = wall_clock
        self._last_publish = -math.inf
        self._interval_s = PUBLISH_INTERVAL_S
        self._dirty = True
        self._chart_metric = metric
        self._histories: dict[str, _History] = {}
        self._configs: dict[str, tuple[Any, dict[str, Any]]] = {}  # trial id -> (config, plain)
        self.doc: dict[str, Any] = {
            "name": name, "status": "RUNNING", "metric": metric, "mode": mode,
            "scheduler": scheduler, "searcher": searcher, "storage_path": storage_path,
            "started_at": self._wall(), "updated_at": self._wall(), "error": None,
            "chart_metric": metric, "num_trials": 0, "trial_counts": {}, "best": None,
            "trials_left_out": 0, "trials": [],
        }

    # -- what the runner tells it ------------------------------------------------------------
    def result(self, trial: Trial, result: Mapping[str, Any]) -> None:
        """Record one result's point of the charted metric (the first numeric metric reported
        when TuneConfig has no metric)."""
        self._dirty = True
        if self._chart_metric is None:
            self._chart_metric = next((k for k, v in result.items() if k not in AUTO_KEYS
                                       and _number(v) is not None), None)
            self.doc["chart_metric"] = self._chart_metric
        y = _number(result.get(self._chart_metric)) if self._chart_metric else None
        if y is None:
            return
        x = _number(result.get("training_iteration"))
        history = self._histories.get(trial.trial_id)
        if history is None:
            history = self._histories[trial.trial_id] = _History()
        history.add(trial.iteration if x is None else x, _round(y))

    def changed(self) -> None:
        """A trial's status changed (started, paused, ended): the next publish() writes."""
        self._dirty = True

    def publish(self, trials: list[Trial], force: bool = False) -> None:
        """Write the document if something changed and the interval has passed (or force)."""
        now = self._clock()
        if not self._dirty or (not force and now - self._last_publish < self._interval_s):
            return
        self._last_publish, self._dirty = now, False
        self._write(trials, self._background or self._put)

    def finished(self, trials: list[Trial], status: str, error: str | None = None) -> None:
        """The experiment ended: FINISHED, ERROR (with the error's headline) or INTERRUPTED.
        This last write is made here, after any background write, so it is the one kept."""
        self.doc["status"], self.doc["error"] = status, _headline(error)
        if self._background is not None:
            self._background.close()
        self._dirty = False
        self._write(trials, self._put)

    def _write(self, trials: list[Trial], put: Callable[[str, bytes], None]) -> None:
        try:
            self._fill(trials)
            body = json.dumps(self.doc, default=str, allow_nan=False).encode()
            self._interval_s = PUBLISH_INTERVAL_S + len(body) / 100_000
            put(f"{KEY_PREFIX}{self.doc['name']}", body)
        except Exception:  # noqa: BLE001 - the dashboard feed never fails an experiment
            pass

    # -- building the document ---------------------------------------------------------------
    def _fill(self, trials: list[Trial]) -> None:
        doc = self.doc
        doc["updated_at"] = self._wall()
        doc["num_trials"] = len(trials)
        counts: dict[str, int] = {}
        for t in trials:
            counts[t.status] = counts.get(t.status, 0) + 1
        doc["trial_counts"] = counts
        best = self._best_of(trials)
        doc["best"] = ({"trial_id": best.trial_id, "value": self._best_value(best)}
                       if best is not None else None)
        kept = self._kept(trials)
        doc["trials_left_out"] = len(trials) - len(kept)
        doc["trials"] = [self._entry(t) for t in kept]

    def _best_value(self, trial: Trial) -> float | None:
        metric, mode = self.doc["metric"], self.doc["mode"]
        if not metric or mode not in ("min", "max"):
            return None
        seen = trial.metric_analysis.get(metric)
        value = _number(seen[mode]) if seen else None
        return None if value is None else _round(value)

    def _best_of(self, trials: Iterable[Trial]) -> Trial | None:
        scored = [(v, t) for t in trials if (v := self._best_value(t)) is not None]
        if not scored:
            return None
        pick = max if self.doc["mode"] == "max" else min
        return pick(scored, key=lambda vt: vt[0])[1]

    def _kept(self, trials: list[Trial]) -> list[Trial]:
        """All trials, or of a larger experiment: the best, the unfinished, then the newest."""
        if len(trials) <= MAX_TRIALS:
            return trials
        order = {t.trial_id: i for i, t in enumerate(trials)}
        scored = [(v, t) for t in trials if (v := self._best_value(t)) is not None]
        scored.sort(key=lambda vt: vt[0], reverse=self.doc["mode"] == "max")
        chosen: dict[str, Trial] = {t.trial_id: t for _, t in scored[:MAX_BEST]}
        newest_first = trials[::-1]
        for group in ([t for t in newest_first if not t.is_finished], newest_first):
            for t in group:
                if len(chosen) >= MAX_TRIALS:
                    break
                chosen.setdefault(t.trial_id, t)
        return sorted(chosen.values(), key=lambda t: order[t.trial_id])

    def _entry(self, trial: Trial) -> dict[str, Any]:
        history = self._histories.get(trial.trial_id)
        last = trial.last_result or {}
        return {
            "trial_id": trial.trial_id, "name": str(trial), "status": trial.status,
            "config": self._config_of(trial), "iterations": trial.iteration,
            "time_total_s": _round(trial.time_total_s), "num_failures": trial.num_failures,
            "metrics": _plain_metrics(last), "best": self._best_value(trial),
            "error": _headline(trial.error_msg),  # a recovering trial shows its last failure
            "history": history.plain() if history else [],
        }

    def _config_of(self, trial: Trial) -> dict[str, Any]:
        cached = self._configs.get(trial.trial_id)
        if cached is not None and cached[0] is trial.config:  # PBT replaces a trial's config
            return cached[1]
        flat: dict[str, Any] = {}
        _flatten(trial.config if isinstance(trial.config, Mapping) else {}, "", flat)
        plain = {k: plain_value(v) for k, v in list(flat.items())[:MAX_VALUES]}
        self._configs[trial.trial_id] = (trial.config, plain)
        return plain


def feed_for(name: str, controller: Any, path: str) -> ExperimentFeed:
    """The feed of the experiment `controller` runs; metric and mode as the scheduler or
    searcher took them when TuneConfig has none."""
    settings, scheduler, search = controller.settings, controller.scheduler, controller.search_alg
    metric = settings.metric or getattr(scheduler, "metric", None) or getattr(search, "metric", None)
    mode = settings.mode or getattr(scheduler, "_mode", None) or getattr(search, "mode", None)
    feed = ExperimentFeed(name, metric=metric if isinstance(metric, str) else None,
                          mode=mode if mode in ("min", "max") else None,
                          scheduler=type(scheduler).__name__, searcher=_searcher_name(search),
                          storage_path=path, background=True)
    for trial in controller.get_trials():  # a restored experiment's charts start from the beginning
        for result in trial.results:
            feed.result(trial, result)
    return feed


def _searcher_name(search_alg: Any) -> str:
    """"OptunaSearch", or with its wrappers "ConcurrencyLimiter(OptunaSearch)"."""
    if isinstance(search_alg, SearchGenerator):
        search_alg = search_alg.searcher
    names = [type(search_alg).__name__]
    inner = getattr(search_alg, "searcher", None)
    while isinstance(inner, Searcher) and len(names) < 5:
        names.append(type(inner).__name__)
        inner = getattr(inner, "searcher", None)
    return "(".join(names) + ")" * (len(names) - 1)


# -- plain JSON values ---------------------------------------------------------------------------
def plain_value(value: Any, depth: int = 0) -> Any:
    """A config value as JSON: numbers, strings, None and short lists as they are; anything
    else (a function, a class, an array) as its truncated repr."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, str):
        return value[:MAX_TEXT]
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    number = _number(value)
    if number is not None:
        return number
    if isinstance(value, list | tuple) and depth < 2:
        return [plain_value(v, depth + 1) for v in value[:20]]
    try:
        return repr(value)[:MAX_TEXT]
    except Exception:  # noqa: BLE001 - a broken __repr__ is no reason to fail
        return f"<{type(value).__name__}>"


def _plain_metrics(result: Mapping[str, Any]) -> dict[str, Any]:
    """The trainable's own reported values (numbers and strings), nested dicts as a/b."""
    flat: dict[str, Any] = {}
    _flatten({k: v for k, v in result.items() if k not in AUTO_KEYS}, "", flat)
    out: dict[str, Any] = {}
    for key, value in flat.items():
        if len(out) >= MAX_VALUES:
            break
        if isinstance(value, str):
            out[key] = value[:MAX_TEXT]
        elif (number := _number(value)) is not None:
            out[key] = _round(number)
    return out


def _flatten(config: Mapping[str, Any], prefix: str, out: dict[str, Any]) -> None:
    for key, value in config.items():
        if len(out) >= MAX_VALUES:
            return
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            _flatten(value, name + "/", out)
        else:
            out[name] = value


def _number(value: Any) -> float | None:
    """A finite int or float (numpy scalars too); None for anything else, bools included."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return value if math.isfinite(value) else None
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "shape", None) == ():
        try:
            return _number(item())
        except Exception:  # noqa: BLE001
            return None
    return None


def _round(value: float) -> float:
    """Six significant digits: enough for a chart and a table, a third of the bytes."""
    return value if isinstance(value, int) else float(f"{value:.6g}")


def _headline(error: str | None) -> str | None:
    """An error's one line: a traceback's exception line, else its first line."""
    if not error:
        return None
    lines = [line for line in error.strip().splitlines() if line.strip()]
    if lines and lines[0].startswith("Traceback"):
        top = [line for line in lines if not line.startswith((" ", "\t", "Traceback"))]
        lines = top[-1:] or lines
    return lines[0][:2 * MAX_TEXT] if lines else None
