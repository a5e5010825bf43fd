"""What a run leaves on storage, so that `Tuner.restore` can continue it and `ResultGrid` /
`ExperimentAnalysis` can read it:

  <storage_path>/<name>/
    tuner.pkl                 the trainable's name, param_space, TuneConfig, RunConfig
    experiment_state.pkl      trials (config, status, results, checkpoints), searcher, scheduler
    experiment_state.json     the same trials in JSON, for people and tools
    <trial dir>/params.json, params.pkl, result.json (one JSON per line), progress.csv,
                error.txt, checkpoint_000000/ ...
"""

from __future__ import annotations

import csv
import io
import json
import math
import time
from typing import Any

from raylite import cloudpickle
from raylite.tune import _storage
from raylite.tune.experiment.trial import Trial

TUNER_FILE = "tuner.pkl"
STATE_FILE = "experiment_state.pkl"
STATE_JSON = "experiment_state.json"


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


def _flat(d: dict, prefix: str = "") -> dict:
    out: dict = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flat(value, name + "/"))
        else:
            out[name] = value
    return out


class ExperimentWriter:
    """Writes trial files and experiment state; flush() at most every `period_s` unless forced."""

    def __init__(self, experiment_path: str, period_s: float = 1.0) -> None:
        self._path = experiment_path
        self._period_s = period_s
        self._last = 0.0
        self._written: dict[str, int] = {}  # trial id -> results already in result.json
        self._csv_header: dict[str, list[str]] = {}
        _storage.makedirs(experiment_path)

    def write_tuner(self, payload: dict) -> None:
        _storage.write_bytes(_storage.join(self._path, TUNER_FILE), cloudpickle.dumps(payload))

    def flush(self, trials: list[Trial], state: dict, force: bool = False) -> bool:
        """Write what changed; False when skipped (too soon since the last write)."""
        now = time.monotonic()
        if not force and now - self._last < self._period_s:
            return False
        self._last = now
        for trial in trials:
            self._write_trial(trial)
        _storage.write_bytes(_storage.join(self._path, STATE_FILE),
                             cloudpickle.dumps({"trials": trials, **state}))
        summary = {"trials": [{"trial_id": t.trial_id, "status": t.status, "path": t.path,
                               "config": _json_safe(t.config), "num_failures": t.num_failures,
                               "last_result": _json_safe(t.last_result),
                               "error": t.error_msg} for t in trials],
                   "timestamp": time.time()}
        _storage.write_text(_storage.join(self._path, STATE_JSON), json.dumps(summary))
        return True

    def _write_trial(self, trial: Trial) -> None:
        if not trial.path:
            return
        done = self._written.get(trial.trial_id)
        if done is None:
            _storage.makedirs(trial.path)
            _storage.write_text(_storage.join(trial.path, "params.json"),
                                json.dumps(_json_safe(trial.config), indent=2))
            _storage.write_bytes(_storage.join(trial.path, "params.pkl"),
                                 cloudpickle.dumps(trial.config))
            done = 0
        if trial.error_msg and trial.status == Trial.ERROR:
            _storage.write_text(_storage.join(trial.path, "error.txt"), trial.error_msg)
        if done == len(trial.results):
            return
        rows = [{k: v for k, v in r.items()} for r in trial.results]
        lines = "".join(json.dumps(_json_safe(r)) + "\n" for r in rows)
        _storage.write_text(_storage.join(trial.path, "result.json"), lines)
        flat_rows = [_flat({k: v for k, v in r.items() if k != "config"}) for r in rows]
        header = self._csv_header.setdefault(trial.trial_id, list(flat_rows[0]))
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=header, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(flat_rows)
        _storage.write_text(_storage.join(trial.path, "progress.csv"), buf.getvalue())
        self._written[trial.trial_id] = len(trial.results)


def load_state(experiment_path: str) -> dict:
    return cloudpickle.loads(_storage.read_bytes(_storage.join(experiment_path, STATE_FILE)))


def load_tuner(experiment_path: str) -> dict:
    return cloudpickle.loads(_storage.read_bytes(_storage.join(experiment_path, TUNER_FILE)))
