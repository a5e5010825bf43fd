"""HyperOptSearch: Tune's Searcher interface over the `hyperopt` package's TPE.

hyperopt drives its own loop (`fmin`); Tune drives ours. So this keeps a `hyperopt.Trials` store
and calls the TPE step directly: `suggest()` asks TPE for one new trial document and evaluates the
space at it (`space_eval`), `on_trial_complete()` marks the document done with the loss (negated
for mode="max", since hyperopt minimizes). The space may be hyperopt's own (`hp.*`) or a Tune
param_space, converted here; a choice among dicts gives hyperopt's conditional spaces.
"""

from __future__ import annotations

import logging
import math
import pickle
from collections.abc import Mapping
from functools import partial
from typing import Any

import numpy as np

from raylite.tune.search import _convert
from raylite.tune.search.searcher import Searcher

try:
    import hyperopt as hpo
except ImportError:  # the error is raised when HyperOptSearch is built, naming the install
    hpo = None

logger = logging.getLogger(__name__)

DEFAULT_METRIC = "_metric"


class HyperOptSearch(Searcher):
    """A Tune searcher proposing configs with hyperopt's Tree-structured Parzen Estimator.

    Args:
        space: a hyperopt space (a dict of `hp.*` expressions) or a Tune search space. None: Tune
            passes its param_space through `set_search_properties`.
        metric, mode: the objective ("min" or "max").
        points_to_evaluate: configs to try first, spelled as the trainable sees them (a choice by
            its value, not its index).
        n_initial_points: random trials before TPE models the results (hyperopt's n_startup_jobs).
        random_state_seed: seeds the suggestions, so a search repeats exactly.
        gamma: TPE's split between good and bad trials.
    """

    def __init__(
        self,
        space: dict | None = None,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict] | None = None,
        n_initial_points: int = 20,
        random_state_seed: int | None = None,
        gamma: float = 0.25,
    ):
        if hpo is None:
            raise ImportError("HyperOptSearch needs the hyperopt package: pip install hyperopt")
        _convert.check_mode_value("HyperOptSearch", mode)
        if isinstance(metric, list) or isinstance(mode, list):
            raise ValueError("HyperOptSearch optimizes one metric; for several use OptunaSearch "
                             "with metric=[...] and mode=[...]")
        super().__init__(metric=metric, mode=mode)
        algo = hpo.tpe.suggest if n_initial_points is None else partial(
            hpo.tpe.suggest, n_startup_jobs=n_initial_points)
        self._algo = partial(algo, gamma=gamma) if gamma is not None else algo
        self._points_to_evaluate = [dict(p) for p in points_to_evaluate or []]
        self._rstate = np.random.RandomState(random_state_seed)
        self._space: Any = None
        self._domain: Any = None
        self._hpopt_trials: Any = None
        self._live: dict[str, int] = {}  # Tune trial id -> hyperopt tid
        if isinstance(space, Mapping) and space:
            if _convert.has_unresolved(space):
                logger.warning("HyperOptSearch got a Tune search space as `space`; converting it. "
                               "Pass it to tune.Tuner(param_space=...) instead.")
                space = self.convert_search_space(space)
            self._space = space
            self._setup()

    @staticmethod
    def convert_search_space(spec: dict, prefix: str = "") -> dict:
        """A Tune search space as a hyperopt space of the same shape (labels are '/'-joined paths)."""
        if hpo is None:
            raise ImportError("HyperOptSearch needs the hyperopt package: pip install hyperopt")
        return _to_hyperopt(spec, prefix)

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
        if self._domain is not None:
            return False
        if not _convert.has_unresolved(config):
            return False
        self._space = self.convert_search_space(config)
        if metric:
            self._metric = metric
        if mode:
            _convert.check_mode_value("HyperOptSearch", mode)
            self._mode = mode
        self._setup()
        return True

    def _setup(self) -> None:
        if self._metric is None and self._mode:
            self._metric = DEFAULT_METRIC
        self._domain = hpo.Domain(_identity, self._space)
        self._hpopt_trials = hpo.Trials()
        for point in self._points_to_evaluate:
            self._insert_point(point)

    def _insert_point(self, point: Mapping[str, Any]) -> None:
        vals = _encode_point(point, self._space)
        tid = self._hpopt_trials.new_trial_ids(1)[0]
        misc = {"tid": tid, "cmd": self._domain.cmd, "workdir": None,
                "idxs": {label: [tid] if label in vals else [] for label in self._domain.params},
                "vals": {label: [vals[label]] if label in vals else [] for label in self._domain.params}}
        docs = self._hpopt_trials.new_trial_docs([tid], [None], [self._domain.new_result()], [misc])
        self._hpopt_trials.insert_trial_docs(docs)
        self._hpopt_trials.refresh()

    # -- the Searcher interface ---------------------------------------------------------------------
    def suggest(self, trial_id: str) -> dict | None:
        if self._domain is None:
            raise RuntimeError("HyperOptSearch has no search space: pass space=... or a param_space "
                               "to tune.Tuner(param_space=...)")
        _convert.check_metric_mode("HyperOptSearch", self._metric, self._mode)
        doc = self._next_point()
        if doc is None:
            new_ids = self._hpopt_trials.new_trial_ids(1)
            self._hpopt_trials.refresh()
            docs = self._algo(new_ids, self._domain, self._hpopt_trials, self._rstate.randint(2**31 - 1))
            self._hpopt_trials.insert_trial_docs(docs)
            self._hpopt_trials.refresh()
            doc = self._doc(docs[0]["tid"])
        doc["state"] = hpo.JOB_STATE_RUNNING
        self._live[trial_id] = doc["tid"]
        vals = {label: v[0] for label, v in doc["misc"]["vals"].items() if len(v)}
        return hpo.space_eval(self._space, vals)

    def _next_point(self) -> dict | None:
        for doc in self._hpopt_trials.trials:  # a point_to_evaluate not yet handed out
            if doc["state"] == hpo.JOB_STATE_NEW and doc["tid"] not in self._live.values():
                return doc
        return None

    def _doc(self, tid: int) -> dict:
        return next(d for d in self._hpopt_trials.trials if d["tid"] == tid)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        tid = self._live.get(trial_id)
        if tid is not None:
            self._doc(tid)["refresh_time"] = hpo.utils.coarse_utcnow()

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        tid = self._live.pop(trial_id, None)
        if tid is None:
            return
        doc = self._doc(tid)
        doc["refresh_time"] = hpo.utils.coarse_utcnow()
        value = (result or {}).get(self._metric)
        if error or value is None or (isinstance(value, float) and math.isnan(value)):
            # hyperopt's TPE learns only from status "ok": an errored or unscored trial is left out
            doc["state"] = hpo.JOB_STATE_ERROR
            doc["result"] = {"status": hpo.STATUS_FAIL}
        else:
            doc["state"] = hpo.JOB_STATE_DONE
            sign = -1.0 if self._mode == "max" else 1.0
            doc["result"] = {"loss": sign * float(value), "status": hpo.STATUS_OK}
        self._hpopt_trials.refresh()

    # -- state: the Domain holds a function, so it is rebuilt from the space on restore -------------
    def get_state(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_domain"}

    def set_state(self, state: dict) -> None:
        self.__dict__.update(state)
        if self._space is not None:
            self._domain = hpo.Domain(_identity, self._space)

    def __getstate__(self) -> dict:  # Tune pickles the searcher whole into experiment_state.pkl
        return self.get_state()

    def __setstate__(self, state: dict) -> None:
        self.__dict__["_domain"] = None
        self.set_state(state)

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as f:
            pickle.dump(self.get_state(), f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            self.set_state(pickle.load(f))


def _identity(config: Any) -> Any:
    return config


def _param_labels(node: Any) -> list[str]:
    return [n.pos_args[0].obj for n in hpo.pyll.dfs(node) if n.name == "hyperopt_param"]


def _required_labels(space: Any) -> set[str]:
    """Labels outside every choice's options: each point must give these."""
    inside: set[str] = set()
    for node in hpo.pyll.dfs(hpo.pyll.as_apply(space)):
        if node.name == "switch":
            for option in node.pos_args[1:]:
                inside.update(_param_labels(option))
    return set(_param_labels(hpo.pyll.as_apply(space))) - inside


def _encode_point(point: Mapping[str, Any], space: Any) -> dict[str, Any]:
    """A config as the trainable sees it -> hyperopt's vals (a choice by its index), by walking
    the point and the space's expression side by side."""
    vals: dict[str, Any] = {}

    def visit(value: Any, node: Any, where: str) -> None:
        if node.name == "dict":
            if not isinstance(value, Mapping):
                raise ValueError(f"HyperOptSearch: points_to_evaluate gives {where or 'the point'} "
                                 f"the value {value!r} where the space has a dict")
            for key, sub in node.named_args:
                if key in value:
                    visit(value[key], sub, f"{where}/{key}" if where else key)
        elif node.name == "switch" and node.pos_args[0].name == "hyperopt_param":
            label, options = node.pos_args[0].pos_args[0].obj, node.pos_args[1:]
            index = _option_index(value, options)
            if index is None:
                shown = [o.obj if o.name == "literal" else "<expression>" for o in options]
                raise ValueError(f"HyperOptSearch: points_to_evaluate gives {label!r} the value "
                                 f"{value!r}, which is not one of its choices {shown!r}")
            vals[label] = index
            visit(value, options[index], where)
        elif node.name != "literal":
            labels = _param_labels(node)
            if len(labels) == 1:
                vals[labels[0]] = value

    visit(point, hpo.pyll.as_apply(space), "")
    missing = _required_labels(space) - set(vals)
    if missing:
        raise ValueError(f"HyperOptSearch: points_to_evaluate misses {sorted(missing)} of the search "
                         f"space; each point must give every searched parameter")
    return vals


def _option_index(value: Any, options: list) -> int | None:
    for i, option in enumerate(options):  # a plain value first, then a dict by its keys
        if option.name == "literal" and option.obj == value:
            return i
    for i, option in enumerate(options):
        if option.name == "dict" and isinstance(value, Mapping) and {k for k, _ in option.named_args} == set(value):
            return i
    for i, option in enumerate(options):  # a Domain among the categories
        if option.name not in ("literal", "dict") and not isinstance(value, Mapping):
            return i
    return None


def _to_hyperopt(spec: Mapping[str, Any], prefix: str = "") -> dict:
    from raylite.tune.search import sample

    _, domains, grids = _convert.walk_space(spec)
    _convert.refuse_grids(grids, "HyperOptSearch")
    out = _copy_tree(spec)
    for path, domain in domains.items():
        label = "/".join((prefix, *path) if prefix else path)
        node = out
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = _expression(label, domain, sample)
    return out


def _copy_tree(spec: Any) -> Any:
    if isinstance(spec, Mapping) and not _convert.is_grid(spec):
        return {k: _copy_tree(v) for k, v in spec.items()}
    return spec


def _expression(label: str, domain: Any, sample: Any) -> Any:
    hp, scope = hpo.hp, hpo.pyll.scope
    sampler = domain.get_sampler()
    q = None
    if isinstance(sampler, sample.Quantized):
        q, sampler = sampler.q, sampler.sampler
    log = isinstance(sampler, sample.LogUniform)
    if isinstance(domain, sample.Integer):
        if log:  # tune.lograndint's upper bound is exclusive, tune.qlograndint's inclusive
            hi = domain.upper if q else domain.upper - 1
            return scope.int(hp.qloguniform(label, math.log(domain.lower), math.log(hi), q or 1))
        if isinstance(sampler, sample.Uniform):
            if q:  # tune.qrandint: upper bound inclusive
                return scope.int(hp.quniform(label, domain.lower, domain.upper, q))
            return hp.uniformint(label, domain.lower, domain.upper - 1)
    if isinstance(domain, sample.Float):
        if log:
            lo, hi = math.log(domain.lower), math.log(domain.upper)
            return hp.qloguniform(label, lo, hi, q) if q else hp.loguniform(label, lo, hi)
        if isinstance(sampler, sample.Uniform):
            return hp.quniform(label, domain.lower, domain.upper, q) if q else hp.uniform(
                label, domain.lower, domain.upper)
        if isinstance(sampler, sample.Normal):
            return hp.qnormal(label, sampler.mean, sampler.sd, q) if q else hp.normal(
                label, sampler.mean, sampler.sd)
    if isinstance(domain, sample.Categorical) and isinstance(sampler, sample.Uniform):
        options = []
        for i, category in enumerate(domain.categories):
            if isinstance(category, Mapping):
                options.append(_to_hyperopt(category, prefix=label))
            elif isinstance(category, sample.Domain):
                options.append(_expression(f"{label}/{i}", category, sample))
            else:
                options.append(category)
        return hp.choice(label, options)
    raise ValueError(f"HyperOptSearch cannot search {label!r}: it is a {_convert.describe(domain)}, which "
                     "hyperopt has no expression for (it takes uniform, loguniform, normal and quantized "
                     "floats and ints, and choices). Use one of those, or another search_alg.")
