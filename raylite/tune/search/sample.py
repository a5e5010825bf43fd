"""Search-space primitives: a Domain says what values a parameter may take, a Sampler how to draw.

Searchers (the default random/grid one, Optuna, HyperOpt) read these objects to translate a Tune
search space into their own, so the class names, attributes (`lower`, `upper`, `categories`,
`q`, `func`) and sampler types are Ray Tune's. `domain.sample(config, size, random_state)`
draws values with numpy; `random_state` may be a seed, a `numpy.random.Generator` or a legacy
`RandomState`.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable, Sequence
from copy import copy
from typing import Any

import numpy as np

_MISSING = object()

RandomState = Any  # None | int | numpy Generator | numpy RandomState | _Rng


def _warn_base() -> None:
    warnings.warn("The `base` argument is deprecated: it changes nothing (the log scale is "
                  "base-independent); remove it.", DeprecationWarning, stacklevel=3)


class _Rng:
    """One face over numpy's two generator kinds: `integers`/`random` on the legacy
    RandomState are `randint`/`rand`. None means numpy's global state (seeded by np.random.seed)."""

    def __init__(self, seed_or_generator: Any = None) -> None:
        if seed_or_generator is None or isinstance(
                seed_or_generator, (np.random.RandomState, np.random.Generator)):
            self._rng = seed_or_generator
        else:
            self._rng = np.random.default_rng(seed_or_generator)

    @property
    def _source(self) -> Any:
        return self._rng if self._rng is not None else np.random

    def _legacy(self) -> bool:
        return not isinstance(self._rng, np.random.Generator)

    def integers(self, low: int, high: int, size: int) -> np.ndarray:
        if self._legacy():
            return self._source.randint(low, high, size=size)
        return self._source.integers(low, high, size=size)

    def uniform(self, low: float, high: float, size: int) -> np.ndarray:
        return self._source.uniform(low, high, size=size)

    def normal(self, mean: float, sd: float, size: int) -> np.ndarray:
        return self._source.normal(mean, sd, size=size)

    def choice(self, n: int, size: int) -> np.ndarray:
        return self._source.choice(np.arange(n), size=size)

    # Ray's spelling of this class, `_BackwardsCompatibleNumpyRng`, is built by FLAML's searchers
    # and passed back as a random_state; they may also call any numpy method on it.
    @property
    def legacy_rng(self) -> bool:
        return self._legacy()

    @property
    def rng(self) -> Any:
        return self._source

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # never for our own fields (unpickling looks them up first)
            raise AttributeError(name)
        if self._legacy():
            name = {"integers": "randint", "random": "rand"}.get(name, name)
        return getattr(self._source, name)


_BackwardsCompatibleNumpyRng = _Rng


def _as_rng(random_state: RandomState) -> _Rng:
    return random_state if isinstance(random_state, _Rng) else _Rng(random_state)


def _one_or_many(domain: Domain, items: Sequence[Any]) -> Any:
    return list(items) if len(items) > 1 else domain.cast(items[0])


class Domain:
    """A parameter's type and range. At most one sampler is chosen for it (`.uniform()`,
    `.loguniform()`, ...); without one, the class's default sampler is used."""

    sampler: Sampler | None = None
    default_sampler_cls: type | None = None

    def cast(self, value: Any) -> Any:
        """Convert a drawn value to this domain's type."""
        return value

    def set_sampler(self, sampler: Sampler, allow_override: bool = False) -> None:
        if self.sampler and not allow_override:
            raise ValueError(
                f"A {type(self).__name__} parameter can have only one sampler: it already "
                f"has {self.sampler}, and {sampler} was added. Build a new domain instead "
                "(e.g. tune.uniform(...) or tune.loguniform(...)).")
        self.sampler = sampler

    def get_sampler(self) -> Sampler:
        if self.sampler:
            return self.sampler
        assert self.default_sampler_cls is not None
        return self.default_sampler_cls()

    def sample(self, config: dict | list[dict] | None = None, size: int = 1,
               random_state: RandomState = None) -> Any:
        """One value (size=1) or a list of `size` values."""
        return self.get_sampler().sample(self, config=config, size=size,
                                         random_state=_as_rng(random_state))

    def is_grid(self) -> bool:
        return isinstance(self.sampler, Grid)

    def is_function(self) -> bool:
        return False

    def is_valid(self, value: Any) -> bool:
        """Whether `value` lies in this domain."""
        raise NotImplementedError

    @property
    def domain_str(self) -> str:
        return "(unknown)"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.domain_str} {self.get_sampler()}>"


class Sampler:
    """How values are drawn from a domain."""

    def sample(self, domain: Domain, config: dict | list[dict] | None = None, size: int = 1,
               random_state: RandomState = None) -> Any:
        raise NotImplementedError


class BaseSampler(Sampler):
    def __str__(self) -> str:
        return "Base"


class Uniform(Sampler):
    def __str__(self) -> str:
        return "Uniform"


class LogUniform(Sampler):
    def __init__(self, base: object = _MISSING) -> None:
        if base is not _MISSING:
            _warn_base()

    def __str__(self) -> str:
        return "LogUniform"


class Normal(Sampler):
    def __init__(self, mean: float = 0.0, sd: float = 0.0) -> None:
        if not sd > 0:
            raise ValueError(f"A normal distribution needs sd > 0 (got sd={sd}).")
        self.mean = mean
        self.sd = sd

    def __str__(self) -> str:
        return "Normal"


class Grid(Sampler):
    """Marks a Categorical as grid-searched: every value is tried, none is drawn."""

    def sample(self, domain: Domain, config: Any = None, size: int = 1,
               random_state: RandomState = None) -> Any:
        raise RuntimeError("A grid-search domain is expanded, never sampled.")

    def __str__(self) -> str:
        return "Grid"


class Quantized(Sampler):
    """Wraps another sampler and rounds its values to a multiple of `q`."""

    def __init__(self, sampler: Sampler, q: float | int) -> None:
        if sampler is None:
            raise ValueError("Quantized() needs the sampler it rounds.")
        self.sampler = sampler
        self.q = q

    def get_sampler(self) -> Sampler:
        return self.sampler

    def sample(self, domain: Domain, config: Any = None, size: int = 1,
               random_state: RandomState = None) -> Any:
        rng = _as_rng(random_state)
        if self.q == 1:
            return self.sampler.sample(domain, config, size, random_state=rng)
        inner = copy(domain)
        inner.lower = np.ceil(domain.lower / self.q) * self.q  # type: ignore[attr-defined]
        inner.upper = np.floor(domain.upper / self.q) * self.q  # type: ignore[attr-defined]
        values = self.sampler.sample(inner, config, size, random_state=rng)
        rounded = np.round(np.divide(values, self.q)) * self.q
        if isinstance(rounded, np.ndarray):
            return [domain.cast(v) for v in rounded]
        return domain.cast(rounded)

    def __str__(self) -> str:
        return f"Quantized({self.sampler}, q={self.q})"


class Float(Domain):
    """A real interval; None bounds are infinite (only a normal sampler accepts them)."""

    class _Uniform(Uniform):
        def sample(self, domain: Float, config: Any = None, size: int = 1,
                   random_state: RandomState = None) -> Any:
            items = _as_rng(random_state).uniform(domain.lower, domain.upper, size)
            return _one_or_many(domain, items)

    class _LogUniform(LogUniform):
        def sample(self, domain: Float, config: Any = None, size: int = 1,
                   random_state: RandomState = None) -> Any:
            logs = _as_rng(random_state).uniform(np.log(domain.lower), np.log(domain.upper), size)
            return _one_or_many(domain, np.exp(logs))

    class _Normal(Normal):
        def sample(self, domain: Float, config: Any = None, size: int = 1,
                   random_state: RandomState = None) -> Any:
            items = _as_rng(random_state).normal(self.mean, self.sd, size)
            return _one_or_many(domain, items)

    default_sampler_cls = _Uniform

    def __init__(self, lower: float | None, upper: float | None) -> None:
        self.lower = lower if lower is not None else float("-inf")
        self.upper = upper if upper is not None else float("inf")

    def cast(self, value: Any) -> float:
        return float(value)

    def uniform(self) -> Float:
        if not (self.lower > float("-inf") and self.upper < float("inf")):
            raise ValueError(f"A uniform float needs finite bounds (got {self.domain_str}): "
                             "pass both lower and upper to Float().")
        new = copy(self)
        new.set_sampler(self._Uniform())
        return new

    def loguniform(self, base: object = _MISSING) -> Float:
        if base is not _MISSING:
            _warn_base()
        _check_log_bounds(self.lower, self.upper)
        new = copy(self)
        new.set_sampler(self._LogUniform())
        return new

    def normal(self, mean: float = 0.0, sd: float = 1.0) -> Float:
        new = copy(self)
        new.set_sampler(self._Normal(mean, sd))
        return new

    def quantized(self, q: float) -> Float:
        for name, bound in (("lower", self.lower), ("upper", self.upper)):
            if math.isfinite(bound) and not math.isclose(bound / q, round(bound / q)):
                raise ValueError(f"The {name} bound {bound} is not a multiple of the "
                                 f"quantization step q={q}: pick bounds divisible by q.")
        new = copy(self)
        new.set_sampler(Quantized(new.get_sampler(), q), allow_override=True)
        return new

    def is_valid(self, value: float) -> bool:
        return self.lower <= value <= self.upper

    @property
    def domain_str(self) -> str:
        return f"({self.lower}, {self.upper})"


class Integer(Domain):
    """Integers in [lower, upper): upper is exclusive, as numpy's randint."""

    class _Uniform(Uniform):
        def sample(self, domain: Integer, config: Any = None, size: int = 1,
                   random_state: RandomState = None) -> Any:
            items = _as_rng(random_state).integers(int(domain.lower), int(domain.upper), size)
            return _one_or_many(domain, items)

    class _LogUniform(LogUniform):
        def sample(self, domain: Integer, config: Any = None, size: int = 1,
                   random_state: RandomState = None) -> Any:
            logs = _as_rng(random_state).uniform(np.log(domain.lower), np.log(domain.upper), size)
            return _one_or_many(domain, np.floor(np.exp(logs)).astype(int))

    default_sampler_cls = _Uniform

    def __init__(self, lower: int, upper: int) -> None:
        self.lower = lower
        self.upper = upper

    def cast(self, value: Any) -> int:
        return int(value)

    def uniform(self) -> Integer:
        new = copy(self)
        new.set_sampler(self._Uniform())
        return new

    def loguniform(self, base: object = _MISSING) -> Integer:
        if base is not _MISSING:
            _warn_base()
        _check_log_bounds(self.lower, self.upper)
        new = copy(self)
        new.set_sampler(self._LogUniform())
        return new

    def quantized(self, q: int) -> Integer:
        new = copy(self)
        new.set_sampler(Quantized(new.get_sampler(), q), allow_override=True)
        return new

    def is_valid(self, value: int) -> bool:
        return self.lower <= value <= self.upper

    @property
    def domain_str(self) -> str:
        return f"({self.lower}, {self.upper})"


class Categorical(Domain):
    """One of a list of values (of any types; they are never coerced to one numpy dtype)."""

    class _Uniform(Uniform):
        def sample(self, domain: Categorical, config: Any = None, size: int = 1,
                   random_state: RandomState = None) -> Any:
            indices = _as_rng(random_state).choice(len(domain.categories), size)
            return _one_or_many(domain, [domain.categories[i] for i in indices])

    default_sampler_cls = _Uniform

    def __init__(self, categories: Sequence[Any]) -> None:
        self.categories = list(categories)

    def uniform(self) -> Categorical:
        new = copy(self)
        new.set_sampler(self._Uniform())
        return new

    def grid(self) -> Categorical:
        new = copy(self)
        new.set_sampler(Grid())
        return new

    def __len__(self) -> int:
        return len(self.categories)

    def __getitem__(self, item: int) -> Any:
        return self.categories[item]

    def is_valid(self, value: Any) -> bool:
        return value in self.categories

    @property
    def domain_str(self) -> str:
        return f"{self.categories}"


class Function(Domain):
    """A value computed by a user function, called with the trial's config (or no argument)."""

    class _CallSampler(BaseSampler):
        def sample(self, domain: Function, config: Any = None, size: int = 1,
                   random_state: RandomState = None) -> Any:
            if domain.pass_config:
                configs = config if isinstance(config, list) else [config] * size
                items = [_call_with_config(domain.func, configs[i]) for i in range(size)]
            else:
                items = [domain.func() for _ in range(size)]
            return _one_or_many(domain, items)

    default_sampler_cls = _CallSampler

    def __init__(self, func: Callable[..., Any]) -> None:
        if not callable(func):
            raise TypeError(f"sample_from() needs a callable, got {func!r}.")
        signature = inspect.signature(func)
        try:
            signature.bind({})
            pass_config = True
        except TypeError:
            pass_config = False
            try:
                signature.bind()
            except TypeError as exc:
                raise ValueError("A sample_from() function must take no argument or one "
                                 "(the trial's config dict).") from exc
        self.pass_config = pass_config
        self.func = func

    def is_function(self) -> bool:
        return True

    def is_valid(self, value: Any) -> bool:
        return True

    @property
    def domain_str(self) -> str:
        return f"{self.func}()"


class _SpecView(dict):
    """What older sample_from functions expect: `spec.config.x` as well as `spec["config"]["x"]`."""

    def __getattr__(self, name: str) -> Any:
        try:
            value = self[name]
        except KeyError:
            raise AttributeError(name) from None
        return _SpecView(value) if isinstance(value, dict) else value


def _call_with_config(func: Callable[..., Any], config: Any) -> Any:
    config = config if config is not None else {}
    if hasattr(type(config), "_guard"):  # variant_generator's view reads both spellings
        return func(config)
    try:
        return func(config)
    except (AttributeError, KeyError):
        # Ray's older form: lambda spec: spec.config.x
        return func(_SpecView({"config": config}))


def _check_log_bounds(lower: float, upper: float) -> None:
    if not lower > 0 or not 0 < upper < float("inf"):
        raise ValueError(f"A log-uniform domain needs 0 < lower < upper < inf (got lower="
                         f"{lower}, upper={upper}). Did you pass log-transformed bounds? Pass "
                         "the values themselves.")


def sample_from(func: Callable[..., Any]) -> Function:
    """A value computed by `func(config)` (or `func()`) when the trial's config is resolved."""
    return Function(func)


def uniform(lower: float, upper: float) -> Float:
    """A float drawn uniformly from [lower, upper]."""
    return Float(lower, upper).uniform()


def quniform(lower: float, upper: float, q: float) -> Float:
    """A uniform float rounded to a multiple of q."""
    return Float(lower, upper).uniform().quantized(q)


def loguniform(lower: float, upper: float, base: object = _MISSING) -> Float:
    """A float whose logarithm is uniform in [log(lower), log(upper)]."""
    if base is not _MISSING:
        _warn_base()
    return Float(lower, upper).loguniform()


def qloguniform(lower: float, upper: float, q: float, base: object = _MISSING) -> Float:
    """A log-uniform float rounded to a multiple of q."""
    if base is not _MISSING:
        _warn_base()
    return Float(lower, upper).loguniform().quantized(q)


def choice(categories: Sequence[Any]) -> Categorical:
    """One of `categories`, each equally likely."""
    return Categorical(categories).uniform()


def randint(lower: int, upper: int) -> Integer:
    """An integer in [lower, upper) (upper exclusive, as np.random.randint)."""
    return Integer(lower, upper).uniform()


def lograndint(lower: int, upper: int, base: object = _MISSING) -> Integer:
    """An integer in [lower, upper), log-uniformly."""
    if base is not _MISSING:
        _warn_base()
    return Integer(lower, upper).loguniform()


def qrandint(lower: int, upper: int, q: int = 1) -> Integer:
    """An integer in [lower, upper] rounded to a multiple of q (rounding makes upper reachable)."""
    return Integer(lower, upper).uniform().quantized(q)


def qlograndint(lower: int, upper: int, q: int, base: object = _MISSING) -> Integer:
    """A log-uniform integer rounded to a multiple of q."""
    if base is not _MISSING:
        _warn_base()
    return Integer(lower, upper).loguniform().quantized(q)


def randn(mean: float = 0.0, sd: float = 1.0) -> Float:
    """A float from a normal distribution."""
    return Float(None, None).normal(mean, sd)


def qrandn(mean: float, sd: float, q: float) -> Float:
    """A normal float rounded to a multiple of q."""
    return Float(None, None).normal(mean, sd).quantized(q)


# `is_valid`'s annotation is read at run time: FLAML checks a starting value with
# `isinstance(value, inspect.signature(domain.is_valid).parameters["value"].annotation)`, so it
# must be the type itself, not the string `from __future__ import annotations` leaves.
for _cls in (Domain, Float, Integer, Categorical, Function):
    _cls.is_valid.__annotations__.update({"value": {"float": float, "int": int}.get(
        _cls.is_valid.__annotations__.get("value"), Any), "return": bool})
del _cls

__all__ = [
    "BaseSampler", "Categorical", "Domain", "Float", "Function", "Grid", "Integer", "LogUniform",
    "Normal", "Quantized", "Sampler", "Uniform", "choice", "lograndint", "loguniform",
    "qlograndint", "qloguniform", "qrandint", "qrandn", "quniform", "randint", "randn",
    "sample_from", "uniform",
]
