"""RemoteFunction: what `@raylite.remote` makes of a function; `.remote()` submits a task."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
from typing import Any

import cloudpickle

from raylite import api
from raylite._core import code_pickling
from raylite._core import options as O
from raylite._core.strategy import SPREAD, Strategy
from raylite._core.task_spec import DYNAMIC, KIND_TASK, STREAMING, FunctionDescriptor, TaskSpec
from raylite._runtime_env import merge_runtime_env

code_pickling.install()  # exported functions and classes keep their file name and lines


def strategy_to_wire(strategy: Any, resources: dict) -> tuple[list, dict]:
    """Translate a scheduling strategy into (wire strategy, resource request)."""
    from raylite._core.scheduling import bundle_request

    if strategy is None or strategy == "DEFAULT":
        return [], resources
    if strategy == "SPREAD":
        return SPREAD.to_wire(), resources
    if isinstance(strategy, str):
        raise ValueError(f"Unknown scheduling_strategy {strategy!r}: use 'DEFAULT', 'SPREAD', "
                         "NodeAffinitySchedulingStrategy or PlacementGroupSchedulingStrategy.")
    if hasattr(strategy, "hard") and hasattr(strategy, "soft"):  # NodeLabelSchedulingStrategy
        from raylite._core import labels

        return labels.wire_strategy([[e.to_wire() for e in strategy.hard]],
                                    [e.to_wire() for e in strategy.soft]), resources
    if hasattr(strategy, "node_id") and hasattr(strategy, "soft"):
        return Strategy.node(strategy.node_id, strategy.soft).to_wire(), resources
    if hasattr(strategy, "placement_group"):
        pg = strategy.placement_group
        if pg is None:
            return [], resources
        if isinstance(pg, str):
            raise ValueError(f"PlacementGroupSchedulingStrategy(placement_group={pg!r}): pass a "
                             "PlacementGroup, None (no group), or 'default' (the caller's group when "
                             "its children are captured).")
        index = getattr(strategy, "placement_group_bundle_index", -1)
        if index is None:
            index = -1
        # a group known by id only (get_current_placement_group()) has no bundle list to check against
        if index >= 0 and pg.bundle_specs and index >= len(pg.bundle_specs):
            raise ValueError(f"placement_group_bundle_index {index} is out of range: the placement "
                             f"group has {len(pg.bundle_specs)} bundles.")
        return [], bundle_request(resources, pg.id.hex(), index)
    raise TypeError(f"Unsupported scheduling_strategy {strategy!r}")


def check_fits_group(strategy: Any, resources: dict, what: str) -> None:
    """Ray's check before submitting into a placement group: the request must fit the named
    bundle, or some bundle, else ValueError (it would wait forever)."""
    from raylite._core import resources as R

    pg = getattr(strategy, "placement_group", None)
    specs = getattr(pg, "bundle_specs", None)
    if not specs or isinstance(pg, str):
        return
    index = getattr(strategy, "placement_group_bundle_index", -1)
    index = -1 if index is None else index
    wanted = {k: v for k, v in resources.items() if v}
    candidates = [specs[index]] if 0 <= index < len(specs) else specs
    if any(R.fits(wanted, R.to_fixed(b)) for b in candidates):
        return
    bundles = [{k: float(v) for k, v in b.items()} for b in specs]
    raise ValueError(f"Cannot schedule {what} with the placement group because the resource request "
                     f"{R.from_fixed(wanted)} cannot fit into any bundles for the placement group, {bundles}.")


def label_wire(label_selector: dict | None, fallback_strategy: list | None) -> list:
    """The `label_selector=` and `fallback_strategy=` options as one LABELS wire strategy: the
    selector first, then each fallback's, tried in order ([] when neither is given)."""
    from raylite._core import labels

    if not label_selector and not fallback_strategy:
        return []
    selectors = [labels.parse_selector(label_selector)]
    selectors += [labels.parse_selector(f.get("label_selector")) for f in fallback_strategy or []]
    return labels.wire_strategy(selectors)


def capture_and_strategy(strategy: Any, resources: dict, inherited: str, label_selector: dict | None = None,
                         fallback_strategy: list | None = None) -> tuple[list, dict, str]:
    """`strategy_to_wire` plus Ray's child capture: (wire strategy, resources, capture_pg).

    A task or actor placed with `PlacementGroupSchedulingStrategy(pg,
    placement_group_capture_child_tasks=True)` captures its children: those that name no
    scheduling strategy run in any bundle of `pg`, and capture their own children in turn.
    A child opts out with `PlacementGroupSchedulingStrategy(placement_group=None)` (or any
    explicit strategy). `inherited` is the caller's own captured group ("" if none)."""
    from raylite._core.scheduling import bundle_request

    by_labels = label_wire(label_selector, fallback_strategy)
    if by_labels:
        if strategy not in (None, "DEFAULT"):
            raise ValueError(f"raylite does not yet combine label_selector/fallback_strategy with "
                             f"scheduling_strategy={strategy!r}; use one of them.")
        return by_labels, resources, ""
    if uses_current_group(strategy):
        strategy = _resolve_default_group(strategy, inherited)
    if strategy is None or strategy == "DEFAULT":
        if inherited:
            return [], bundle_request(resources, inherited, -1), inherited
    wire, resources = strategy_to_wire(strategy, resources)
    capture = ""
    pg = getattr(strategy, "placement_group", None)
    if pg is not None and getattr(strategy, "placement_group_capture_child_tasks", False):
        capture = pg.id.hex()
    return wire, resources, capture


def uses_current_group(strategy: Any) -> bool:
    """`PlacementGroupSchedulingStrategy(placement_group="default")`: which group it means depends
    on the caller (so a request made from it is not reused for another caller)."""
    return getattr(strategy, "placement_group", None) == "default"


def _resolve_default_group(strategy: Any, inherited: str) -> Any:
    """Ray's `placement_group="default"`: the caller's own placement group when children are
    captured (the strategy's `placement_group_capture_child_tasks`, else whether the caller
    itself captures its children), else no group. A driver is in no group: no group."""
    from raylite.placement_group import PlacementGroup, get_current_placement_group

    capture = strategy.placement_group_capture_child_tasks
    if capture is None:
        capture = bool(inherited)
    group = None
    if capture:
        group = PlacementGroup(bytes.fromhex(inherited), []) if inherited else get_current_placement_group()
    return dataclasses.replace(strategy, placement_group=group,
                               placement_group_capture_child_tasks=bool(capture and group is not None))


def legacy_pg_options(opts: dict) -> dict:
    """`placement_group=` / `placement_group_bundle_index=` options map to the strategy."""
    pg = opts.get("placement_group")
    if pg is None or pg == "default" or opts.get("scheduling_strategy") is not None:
        return opts
    from raylite.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    opts = dict(opts)
    opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
        pg, opts.get("placement_group_bundle_index", -1))
    return opts


# shared by every task that has none of these (a queued task should cost little): never mutated
_NOTHING: dict = {}
_NO_GPUS: tuple = ()


# Ray's FUNCTION_SIZE_ERROR_THRESHOLD: a function or class that pickles to more than this almost
# always captured a large object by accident (Ray refuses it with the same advice)
FUNCTION_SIZE_ERROR_BYTES = 10**8


def _check_code_size(pickled: bytes, code: Any) -> None:
    if len(pickled) <= FUNCTION_SIZE_ERROR_BYTES:
        return
    if inspect.isclass(code):
        what = f"actor {code.__name__}"
    else:
        what = f"remote function {getattr(code, '__module__', '')}.{code.__qualname__}"
    raise ValueError(f"The {what} is too large ({len(pickled) // (1024 * 1024)} MiB > "
                     f"FUNCTION_SIZE_ERROR_THRESHOLD={FUNCTION_SIZE_ERROR_BYTES // (1024 * 1024)} MiB). Check that "
                     "its definition is not implicitly capturing a large array or other object in scope. "
                     "Tip: use ray.put() to put large objects in the Ray object store.")


class ExportedCode:
    """Code (a function or an actor class) pickled once and exported to each cluster that
    runs it; shared by RemoteFunction and ActorClass."""

    def __init__(self, code: Any) -> None:
        self._code = code
        self._pickled: bytes | None = None
        self._descriptor: FunctionDescriptor | None = None
        self._exported_by: Any = None

    def __getstate__(self) -> dict:
        # Captured by another remote function (called inside a task): the export
        # bookkeeping names this process's client, which neither pickles nor applies there.
        state = dict(self.__dict__)
        state["_exported_by"] = None
        if "_placement" in state:
            state["_placement"] = None
        return state

    def _export(self, client: Any) -> FunctionDescriptor:
        if self._descriptor is None:
            code = self._code
            pickled = cloudpickle.dumps(code)
            _check_code_size(pickled, code)
            self._pickled = pickled
            digest = hashlib.sha1(self._pickled).digest()[:16]
            self._descriptor = FunctionDescriptor(getattr(code, "__module__", "") or "", code.__qualname__, digest)
        if self._exported_by is not client:
            client.export_function(self._descriptor.function_id, self._pickled)
            self._exported_by = client
        return self._descriptor


def plain_arity(sig: inspect.Signature) -> tuple[int, int] | None:
    """(required, all) for a signature of plain parameters, else None: a call of positional
    arguments only is then checked by counting them, without Signature.bind (microseconds, on
    every .remote() of a task or an actor call)."""
    params = list(sig.parameters.values())
    if not all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params):
        return None
    return sum(p.default is p.empty for p in params), len(params)


class RemoteFunction(ExportedCode):
    """A function that runs as a task: `f.remote(*args)` returns an ObjectRef at once."""

    def __init__(self, function: Any, options: dict[str, Any]) -> None:
        self._function = function
        self._options = O.validate(dict(options), O.TASK_OPTIONS, f"remote function {function.__qualname__}")
        self._is_generator = inspect.isgeneratorfunction(function) or inspect.isasyncgenfunction(function)
        self._check_returns(self._options)
        # Ray's max_calls (decorator only): a worker that ran this function that many times
        # exits; a GPU function defaults to 1, so each run gets a fresh process and the GPU
        # memory a library cached is given back (Ray's default too). 0: no limit.
        max_calls = self._options.get("max_calls")
        if max_calls is None:
            max_calls = 1 if (self._options.get("num_gpus") or 0) > 0 else 0
        self._max_calls = max_calls
        self._placement: tuple | None = None  # (options, captured group, resources, strategy, capture) of the last call
        ExportedCode.__init__(self, function)
        try:
            self._signature: inspect.Signature | None = inspect.signature(function)
        except (TypeError, ValueError):
            self._signature = None
        self._arity = plain_arity(self._signature) if self._signature is not None else None
        functools.update_wrapper(self, function)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        name = self._function.__name__
        raise TypeError(f"Remote functions cannot be called directly. Instead of running '{name}()', "
                        f"try '{name}.remote()'.")

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return self._remote(args, kwargs, self._options)

    def options(self, **options: Any) -> _FunctionWithOptions:
        O.validate(options, O.TASK_OPTIONS, f"remote function {self._function.__qualname__}")
        self._check_returns(options)
        return _FunctionWithOptions(self, {**self._options, **options})

    def _check_returns(self, options: dict) -> None:
        if "max_calls" in options and options is not self._options:
            raise ValueError("Setting 'max_calls' is not supported in '.options()': give it to the "
                             f"decorator, @remote(max_calls=...) (remote function {self._function.__qualname__}).")
        O.check_generator_returns(options.get("num_returns"), self._is_generator,
                                  f"remote function {self._function.__qualname__}")

    def bind(self, *args: Any, **kwargs: Any) -> Any:
        from raylite.dag.function_node import FunctionNode  # on first bind(): few programs use DAGs

        return FunctionNode(self, args, kwargs, self._options)

    def _remote(self, args: Any = None, kwargs: dict | None = None, opts: dict | None = None,
                **task_options: Any) -> Any:
        """Submit with these options. Ray's spelling `f._remote(args=[...], kwargs={...},
        num_returns=2, ...)` (used by libraries) is accepted: options by keyword."""
        if opts is None:
            O.validate(task_options, O.TASK_OPTIONS, f"remote function {self._function.__qualname__}")
            self._check_returns(task_options)
            opts = {**self._options, **task_options}
        args = tuple(args or ())
        kwargs = dict(kwargs or {})
        client = api.ensure_initialized()
        arity = self._arity
        if self._signature is not None and (kwargs or arity is None or not arity[0] <= len(args) <= arity[1]):
            try:
                self._signature.bind(*args, **kwargs)
            except TypeError as e:
                raise TypeError(f"{self._function.__qualname__}.remote() got bad arguments: {e}") from None
        descriptor = self._export(client)
        opts = legacy_pg_options(opts)
        num_returns = O.resolve_num_returns(opts.get("num_returns"), self._is_generator)
        if num_returns == "streaming":
            wire_returns = STREAMING
        elif num_returns == "dynamic":
            wire_returns = DYNAMIC
        else:
            wire_returns = int(num_returns)
        inherited = api.captured_placement_group()
        placement = self._placement  # the same options (and captured group) give the same request
        if placement is not None and placement[0] is opts and placement[1] == inherited:
            resources, strategy, capture_pg = placement[2], placement[3], placement[4]
        else:
            resources = O.resource_request(opts, default_cpus=1)
            check_fits_group(opts.get("scheduling_strategy"), resources, self._function.__qualname__)
            strategy, resources, capture_pg = capture_and_strategy(
                opts.get("scheduling_strategy"), resources, inherited, opts.get("label_selector"),
                opts.get("fallback_strategy"))
            if not uses_current_group(opts.get("scheduling_strategy")):
                self._placement = (opts, inherited, resources, strategy, capture_pg)
        runtime_env = merge_runtime_env(api.inherited_runtime_env(), opts.get("runtime_env"))
        payload, arg_refs, pinned = client.pack_args(args, kwargs, descriptor.qualname)
        retry_exc = opts.get("retry_exceptions", False) or False
        max_retries = opts.get("max_retries")
        spec = TaskSpec(
            task_id=client.new_task_id(), job_id=client.job_id, kind=KIND_TASK, function=descriptor,
            args=payload, arg_refs=arg_refs, num_returns=wire_returns, owner_address=client.address,
            owner_worker_id=client.worker_id, resources=resources, name=opts.get("name") or "",
            max_retries=3 if max_retries is None else max_retries,
            retry_exceptions=bool(retry_exc), runtime_env=runtime_env, strategy=strategy,
            namespace=client.namespace, parent_task_id=api.current_task_id(),
            method_meta=_NOTHING, concurrency_groups=_NOTHING, gpu_ids=_NO_GPUS, capture_pg=capture_pg,
            max_calls=self._max_calls)
        return client.submit_task(spec, pinned, retry_exc)


class _FunctionWithOptions:
    def __init__(self, fn: RemoteFunction, options: dict) -> None:
        self._fn = fn
        self._options = options

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return self._fn._remote(args, kwargs, self._options)

    def options(self, **options: Any) -> _FunctionWithOptions:
        O.validate(options, O.TASK_OPTIONS, f"remote function {self._fn._function.__qualname__}")
        self._fn._check_returns(options)
        return _FunctionWithOptions(self._fn, {**self._options, **options})

    def bind(self, *args: Any, **kwargs: Any) -> Any:
        from raylite.dag.function_node import FunctionNode  # on first bind(): few programs use DAGs

        return FunctionNode(self._fn, args, kwargs, self._options)
