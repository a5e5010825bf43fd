"""OptunaSearch: Tune's Searcher interface over a real `optuna` Study, through its ask/tell API.

Each Tune trial is one Optuna trial: `suggest()` asks the study (with fixed distributions, or by
running the user's define-by-run function on the asked trial), `on_trial_result()` reports the
intermediate values (so Optuna's own pruners and samplers see learning curves), and
`on_trial_complete()` tells the final value. The space may be a Tune param_space (converted
here), a dict of `optuna.distributions`, or a define-by-run function. Multi-objective studies
take lists for `metric` and `mode`.
"""

from __future__ import annotations

import logging
import pickle
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from raylite.tune.search import _convert
from raylite.tune.search.searcher import Searcher

try:
    import optuna as ot
    from optuna.distributions import BaseDistribution
except ImportError:  # the error is raised when OptunaSearch is built, naming the install
    ot = None
    BaseDistribution = None

logger = logging.getLogger(__name__)

DEFAULT_METRIC = "_metric"  # Tune's anonymous metric, used when only a mode is given
_DEFINE_BY_RUN_WARN_S = 1.0
_PLAIN = (type(None), bool, int, float, str)


class OptunaSearch(Searcher):
    """A Tune searcher proposing configs from an Optuna study (TPESampler unless `sampler=`).

    Args:
        space: a dict of `optuna.distributions` (nested dicts allowed), a Tune search space, or a
            define-by-run function `f(optuna.Trial) -> dict | None`. None: Tune passes its
            param_space through `set_search_properties`.
        metric, mode: the objective; lists of equal length for multi-objective optimization.
        points_to_evaluate: configs to try first (enqueued in the study).
        sampler: an `optuna.samplers.BaseSampler`; `seed` seeds the default TPESampler only.
        study_name, storage: passed to `optuna.create_study` (load_if_exists=True).
        evaluated_rewards: the known results of `points_to_evaluate`, added to the study as
            finished trials instead of being run again.
    """

    def __init__(
        self,
        space: dict[str, Any] | Callable[[Any], dict[str, Any] | None] | None = None,
        metric: str | list[str] | None = None,
        mode: str | list[str] | None = None,
        points_to_evaluate: list[dict] | None = None,
        sampler: Any = None,
        study_name: str | None = None,
        storage: Any = None,
        seed: int | None = None,
        evaluated_rewards: list | None = None,
    ):
        if ot is None:
            raise ImportError("OptunaSearch needs the optuna package: pip install optuna")
        _convert.check_mode_value("OptunaSearch", mode)
        _check_metric_mode_shapes(metric, mode)
        super().__init__(metric=metric if isinstance(metric, str) else None,
                         mode=mode if isinstance(mode, str) else None)
        self._metric, self._mode = metric, mode  # lists too (multi-objective)
        if sampler is not None and not isinstance(sampler, ot.samplers.BaseSampler):
            raise TypeError(f"OptunaSearch(sampler=...) takes an optuna.samplers.BaseSampler, got "
                            f"{type(sampler).__name__}: e.g. optuna.samplers.TPESampler(seed=0)")
        if sampler is not None and seed is not None:
            logger.warning("OptunaSearch: seed=%r is ignored because a sampler was passed; "
                           "seed the sampler itself instead", seed)
        if storage is not None and not isinstance(storage, (str, ot.storages.BaseStorage)):
            raise TypeError("OptunaSearch(storage=...) takes an optuna.storages.BaseStorage or an "
                            f"RDB URL, got {type(storage).__name__}")
        if evaluated_rewards is not None and len(evaluated_rewards) != len(points_to_evaluate or []):
            raise ValueError(f"OptunaSearch: evaluated_rewards has {len(evaluated_rewards)} values but "
                             f"points_to_evaluate has {len(points_to_evaluate or [])} points; give one "
                             "reward per point")
        self._sampler = sampler
        self._seed = seed
        self._study_name = study_name or "optuna"
        self._storage = storage
        self._points_to_evaluate = [dict(p) for p in points_to_evaluate or []]
        self._evaluated_rewards = list(evaluated_rewards) if evaluated_rewards is not None else None
        self._decoders: dict[str, list] = {}  # name -> categories, for non-primitive choices
        self._space: Any = None
        self._ot_study: Any = None
        self._ot_trials: dict[str, Any] = {}
        self._completed_trials: set[str] = set()
        if space is not None:
            self._space = self._read_space(space)
        if self._space:
            self._setup_study()

    # -- search space -------------------------------------------------------------------------------
    def _read_space(self, space: Any) -> Any:
        if callable(space):
            return space
        if isinstance(space, (list, tuple)):
            raise TypeError("OptunaSearch(space=...) no longer takes a list of tuples: pass a dict "
                            "of optuna.distributions, a Tune search space, or a define-by-run function")
        if not isinstance(space, Mapping):
            raise TypeError(f"OptunaSearch(space=...) takes a dict or a function, got {type(space).__name__}")
        if _convert.has_unresolved(space):
            logger.warning("OptunaSearch got a Tune search space as `space`; converting it. Pass it "
                           "to tune.Tuner(param_space=...) instead to keep its constants.")
            return self._convert(space)
        flat = _convert.flatten(space)
        bad = {k: v for k, v in flat.items() if not isinstance(v, BaseDistribution)}
        if bad:
            raise TypeError(f"OptunaSearch: space values must be optuna.distributions, got {bad!r}")
        return flat

    def _convert(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        distributions, decoders = _to_optuna(spec)
        self._decoders.update(decoders)
        return distributions

    @staticmethod
    def convert_search_space(spec: dict) -> dict[str, Any]:
        """A Tune search space as a flat dict of optuna.distributions (nested keys joined by '/')."""
        if ot is None:
            raise ImportError("OptunaSearch needs the optuna package: pip install optuna")
        return _to_optuna(spec)[0]

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
        if self._space:
            return False
        self._space = self._convert(config)
        if metric:
            self._metric = metric
        if mode:
            _convert.check_mode_value("OptunaSearch", mode)
            self._mode = mode
        if not self._space:
            return False
        self._setup_study()
        return True

    # -- the study -----------------------------------------------------------------------------------
    def _setup_study(self) -> None:
        if self._metric is None and self._mode:
            if isinstance(self._mode, list):
                raise ValueError("OptunaSearch: a list of modes (multi-objective) needs the list of "
                                 "metrics too: metric=[...]")
            self._metric = DEFAULT_METRIC
        if not self._mode:
            return  # built at the first suggest, once Tune has passed the mode
        sampler = self._sampler or ot.samplers.TPESampler(seed=self._seed)
        if isinstance(self._mode, list):
            directions = {"directions": [_direction(m) for m in self._mode]}
        else:
            directions = {"direction": _direction(self._mode)}
        self._ot_study = ot.create_study(storage=self._storage, sampler=sampler,
                                         pruner=ot.pruners.NopPruner(), study_name=self._study_name,
                                         load_if_exists=True, **directions)
        self._warm_start()

    def _warm_start(self) -> None:
        if not self._points_to_evaluate:
            return
        if not callable(self._space):
            for point in self._points_to_evaluate:
                unknown = set(_convert.flatten(point)) - set(self._space)
                if unknown:
                    raise ValueError(f"OptunaSearch: points_to_evaluate names {sorted(unknown)}, which "
                                     f"are not in the search space {sorted(self._space)}")
        if self._evaluated_rewards is not None:
            for point, reward in zip(self._points_to_evaluate, self._evaluated_rewards):
                self.add_evaluated_point(point, reward)
        else:
            for point in self._points_to_evaluate:
                self._ot_study.enqueue_trial(self._encode(point))

    def _encode(self, point: Mapping[str, Any]) -> dict[str, Any]:
        flat = _convert.flatten(point)
        for name, categories in self._decoders.items():
            if name in flat:
                flat[name] = _index_of(categories, flat[name], name)
        return flat

    def _decode(self, params: Mapping[str, Any]) -> dict[str, Any]:
        flat = dict(params)
        for name, categories in self._decoders.items():
            if name in flat:
                flat[name] = categories[flat[name]]
        return _convert.unflatten(flat)

    def _ready(self) -> None:
        if not self._space:
            raise RuntimeError("OptunaSearch has no search space: pass space=... or a param_space "
                               "to tune.Tuner(param_space=...)")
        _convert.check_metric_mode("OptunaSearch", self._metric, self._mode)
        if self._ot_study is None:
            self._setup_study()

    # -- the Searcher interface ---------------------------------------------------------------------
    def suggest(self, trial_id: str) -> dict | None:
        self._ready()
        ot_trial = self._ot_trials.get(trial_id)
        if callable(self._space):
            if ot_trial is None:
                ot_trial = self._ot_trials[trial_id] = self._ot_study.ask()
            return _convert.unflatten(_run_define_by_run(self._space, ot_trial))
        if ot_trial is None:
            ot_trial = self._ot_trials[trial_id] = self._ot_study.ask(fixed_distributions=self._space)
        return self._decode(ot_trial.params)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if isinstance(self._metric, list) or trial_id in self._completed_trials:
            return  # Optuna takes no intermediate values for multi-objective studies
        ot_trial = self._ot_trials.get(trial_id)
        value = result.get(self._metric)
        step = result.get("training_iteration")
        if ot_trial is None or value is None or step is None:
            return
        ot_trial.report(float(value), int(step))

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        if trial_id in self._completed_trials or trial_id not in self._ot_trials:
            return
        self._completed_trials.add(trial_id)
        ot_trial = self._ot_trials[trial_id]
        value: Any = None
        if result:
            if isinstance(self._metric, list):
                value = [result.get(m) for m in self._metric]
                value = None if any(v is None for v in value) else value
            else:
                value = result.get(self._metric)
        if value is not None:
            state = ot.trial.TrialState.COMPLETE
        else:  # a trial that errored failed; one stopped early (by a scheduler) without a value was pruned
            state = ot.trial.TrialState.FAIL if error else ot.trial.TrialState.PRUNED
        try:
            self._ot_study.tell(ot_trial, value, state=state)
        except Exception as exc:  # e.g. a NaN value: Optuna refuses it; the search goes on
            logger.warning("OptunaSearch could not record trial %s (%r): %s", trial_id, value, exc)

    def add_evaluated_point(self, parameters: dict, value: float, error: bool = False,
                            pruned: bool = False, intermediate_values: list[float] | None = None) -> None:
        """Tell the study about a config already evaluated elsewhere (no trial is run for it)."""
        self._ready()
        if callable(self._space):
            raise TypeError("OptunaSearch: evaluated points need a space of optuna.distributions or a "
                            "Tune search space, not a define-by-run function")
        state = ot.trial.TrialState.COMPLETE
        if error:
            state, value = ot.trial.TrialState.FAIL, None
        elif pruned:
            state = ot.trial.TrialState.PRUNED
        params = self._encode(parameters)
        values = {"values": list(value)} if isinstance(value, (list, tuple)) else {"value": value}
        trial = ot.trial.create_trial(
            state=state, params=params, distributions={k: self._space[k] for k in params},
            intermediate_values=dict(enumerate(intermediate_values)) if intermediate_values else None,
            **values)
        self._ot_study.add_trial(trial)

    # -- state ---------------------------------------------------------------------------------------
    def get_state(self) -> dict:
        return dict(self.__dict__)

    def set_state(self, state: dict) -> None:
        self.__dict__.update(state)

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as f:
            pickle.dump(self.get_state(), f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            self.set_state(pickle.load(f))


def _direction(mode: str) -> str:
    return "minimize" if mode == "min" else "maximize"


def _check_metric_mode_shapes(metric: Any, mode: Any) -> None:
    if isinstance(metric, list) or isinstance(mode, list):
        if mode is not None and metric is not None and (
                not isinstance(metric, list) or not isinstance(mode, list) or len(metric) != len(mode)):
            raise ValueError(f"OptunaSearch: for multi-objective search give metric and mode as lists of "
                             f"the same length, got metric={metric!r}, mode={mode!r}")


def _index_of(categories: list, value: Any, name: str) -> int:
    for i, category in enumerate(categories):
        if category == value:
            return i
    raise ValueError(f"OptunaSearch: {value!r} given for {name!r} is not one of its choices {categories!r}")


def _run_define_by_run(func: Callable[[Any], Any], ot_trial: Any) -> dict[str, Any]:
    start = time.monotonic()
    returned = func(ot_trial)
    taken_s = time.monotonic() - start
    if taken_s > _DEFINE_BY_RUN_WARN_S:
        warnings.warn(f"OptunaSearch's define-by-run function took {taken_s:.1f} s: it should only "
                      "define the space; put the training in the trainable given to tune.Tuner()",
                      stacklevel=3)
    if returned is not None and (not isinstance(returned, dict)
                                 or not all(isinstance(k, str) for k in returned)):
        raise TypeError("OptunaSearch's define-by-run function must return None or a dict with str "
                        f"keys (constants to add to the config), got {returned!r}")
    return {**ot_trial.params, **(returned or {})}


def _to_optuna(spec: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, list]]:
    """A Tune space -> ({'a/b': optuna distribution}, {'a/b': categories} for index-coded choices)."""
    _, domains, grids = _convert.walk_space(spec)
    _convert.refuse_grids(grids, "OptunaSearch")
    distributions: dict[str, Any] = {}
    decoders: dict[str, list] = {}
    for path, domain in domains.items():
        name = "/".join(path)
        distributions[name], categories = _distribution(name, domain)
        if categories is not None:
            decoders[name] = categories
    return distributions, decoders


def _distribution(name: str, domain: Any) -> tuple[Any, list | None]:
    from raylite.tune.search import sample

    sampler = domain.get_sampler()
    step = None
    if isinstance(sampler, sample.Quantized):
        step, sampler = sampler.q, sampler.sampler
    log = isinstance(sampler, sample.LogUniform)
    if isinstance(domain, sample.Categorical) and isinstance(sampler, sample.Uniform):
        categories = list(domain.categories)
        if all(isinstance(c, _PLAIN) for c in categories):
            return ot.distributions.CategoricalDistribution(categories), None
        # Optuna stores only plain values: offer the indices and map them back in suggest()
        return ot.distributions.CategoricalDistribution(list(range(len(categories)))), categories
    if isinstance(domain, sample.Integer) and (log or isinstance(sampler, sample.Uniform)):
        if log and step and step != 1:
            logger.warning("OptunaSearch: %s is quantized and log-uniform; Optuna cannot do both, "
                           "so the quantization (q=%s) is dropped", name, step)
        if log:  # tune.lograndint: upper bound exclusive
            return ot.distributions.IntDistribution(domain.lower, domain.upper - 1, log=True), None
        if step:  # tune.qrandint: upper bound inclusive
            return ot.distributions.IntDistribution(domain.lower, domain.upper, step=int(step)), None
        return ot.distributions.IntDistribution(domain.lower, domain.upper - 1), None  # tune.randint
    if isinstance(domain, sample.Float) and (log or isinstance(sampler, sample.Uniform)):
        if log and step:
            logger.warning("OptunaSearch: %s is quantized and log-uniform; Optuna cannot do both, "
                           "so the quantization (q=%s) is dropped", name, step)
            step = None
        return ot.distributions.FloatDistribution(domain.lower, domain.upper, log=log, step=step), None
    raise ValueError(f"OptunaSearch cannot search {name!r}: it is a {_convert.describe(domain)}, which "
                     "Optuna has no distribution for (it takes uniform, loguniform and quantized floats "
                     "and ints, and choices). Use one of those, or another search_alg for this space.")
