"""ActorClass, ActorHandle, ActorMethod: what `@raylite.remote` makes of a class; get_actor, kill."""

from __future__ import annotations

import inspect
import threading
import types
from typing import Any

from raylite import api
from raylite._core import options as O
from raylite._core.ids import ActorID
from raylite._core.serialization import contained_refs_sink
from raylite._core.task_spec import (
    DYNAMIC,
    KIND_ACTOR_CALL,
    KIND_ACTOR_CREATE,
    STREAMING,
    FunctionDescriptor,
    TaskSpec,
)
from raylite._runtime_env import merge_runtime_env
from raylite.remote_function import (
    ExportedCode,
    capture_and_strategy,
    check_fits_group,
    legacy_pg_options,
    plain_arity,
)


def method(*args: Any, **kwargs: Any) -> Any:
    """Annotate an actor method: `@raylite.method(num_returns=2)`."""
    def wrap(fn):
        for k in kwargs:
            if k not in O.METHOD_OPTIONS:
                raise ValueError(f"Invalid option {k!r} for raylite.method; valid: {sorted(O.METHOD_OPTIONS)}")
        is_gen = inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn)
        O.check_generator_returns(kwargs.get("num_returns"), is_gen, f"actor method {fn.__qualname__}")
        fn.__raylite_method_options__ = dict(kwargs)
        return fn

    if len(args) == 1 and callable(args[0]) and not kwargs:
        return wrap(args[0])
    return wrap


# methods every actor has, as in Ray: `__ray_ready__` returns True once the actor is created,
# `__ray_terminate__` ends it like exit_actor() (queued calls before it still run); and the
# calls that set up the actor's part of a compiled graph (raylite.dag.compiled_dag_node)
_BUILTIN_METHODS = ("__ray_ready__", "__ray_terminate__", "__ray_call__", "__raylite_cgraph_open__",
                    "__raylite_cgraph_start__", "__raylite_cgraph_abort__")


def _method_meta(cls: type) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for name, member in inspect.getmembers(cls):
        if not callable(member) or (name.startswith("__") and name != "__call__"):
            continue
        opts = getattr(member, "__raylite_method_options__", {})
        is_gen = inspect.isgeneratorfunction(member) or inspect.isasyncgenfunction(member)
        meta[name] = O.resolve_num_returns(opts.get("num_returns"), is_gen)
    return meta


def _method_signatures(cls: type, names: Any) -> dict[str, inspect.Signature]:
    """Each method's call signature as a caller sees it (without `self`), so `.remote()` refuses
    a wrong call at once with TypeError, as Ray's does; methods whose signature Python cannot
    tell (builtins) are left out and checked by the actor only."""
    signatures = {}
    for name in names:
        raw = inspect.getattr_static(cls, name, None)
        try:
            if isinstance(raw, staticmethod):
                signatures[name] = inspect.signature(raw.__func__)
                continue
            func = raw.__func__ if isinstance(raw, classmethod) else raw
            sig = inspect.signature(func)
        except (TypeError, ValueError):
            continue
        params = list(sig.parameters.values())
        if params and params[0].kind in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD):
            signatures[name] = sig.replace(parameters=params[1:])
        elif params and params[0].kind is params[0].VAR_POSITIONAL:
            signatures[name] = sig  # (*args): self is one of them
    return signatures


def _check_actor_options(opts: dict[str, Any], cls: type) -> None:
    """Ray's checks across options of an actor (each option alone is checked by O.validate)."""
    if opts.get("get_if_exists") and not opts.get("name"):
        raise ValueError("The actor name must be specified to use `get_if_exists`.")
    if opts.get("allow_out_of_order_execution") is False:
        if _is_async(cls):
            raise ValueError("If you're using async actors, Ray can't execute actor tasks in order. "
                             "Set `allow_out_of_order_execution=True` to allow out-of-order execution.")
        if (opts.get("max_concurrency") or 1) > 1:
            raise ValueError("If you're using multi-threaded actors, Ray can't execute actor tasks in order. "
                             "Set `allow_out_of_order_execution=True` to allow out-of-order execution.")


def _is_async(cls: type) -> bool:
    return any(inspect.iscoroutinefunction(m) or inspect.isasyncgenfunction(m)
               for _, m in inspect.getmembers(cls, predicate=inspect.isfunction))


def _wire_returns(nr: Any) -> int:
    if nr == "streaming":
        return STREAMING
    if nr == "dynamic":
        return DYNAMIC
    return int(nr)


class ActorClassInheritanceException(TypeError):
    """A class statement named an actor class (what `@remote` returned) as its base: Ray refuses
    it, since the base is no longer a class. Inherit from the plain class, then decorate."""


class ActorClass(ExportedCode):
    """A class that runs as an actor: `Cls.remote(*args)` starts one and returns its handle."""

    def __mro_entries__(self, bases: tuple) -> tuple:
        """`class Derived(SomeActor):` lands here (an ActorClass is not a type)."""
        raise ActorClassInheritanceException(
            f"Attempted to define a subclass of actor class '{self._cls.__qualname__}'. Inheriting from "
            "actor classes is not currently supported. Inherit from the plain class instead and make "
            "the derived class an actor class (with @ray.remote).")

    def __init__(self, cls: type, options: dict[str, Any]) -> None:
        self._cls = cls
        self._options = O.validate(dict(options), O.ACTOR_OPTIONS, f"actor class {cls.__qualname__}")
        _check_actor_options(self._options, cls)
        ExportedCode.__init__(self, cls)
        self._meta = _method_meta(cls)
        self._signatures = _method_signatures(cls, self._meta)
        self._async = _is_async(cls)
        self.__name__ = cls.__name__
        self.__qualname__ = cls.__qualname__
        self.__doc__ = cls.__doc__
        self.__module__ = cls.__module__

    def __getattr__(self, name: str) -> Any:
        """Attributes of the class itself (constants, classmethods, staticmethods), as Ray's
        actor class, a subclass of the user's, has them: `Counter.LIMIT`, `Counter.build(...)`."""
        cls = self.__dict__.get("_cls")
        if cls is None or name.startswith("__"):
            raise AttributeError(name)
        try:
            value = getattr(cls, name)
        except AttributeError:
            raise AttributeError(f"actor class {cls.__qualname__} has no attribute {name!r}") from None
        if isinstance(value, types.FunctionType):
            # a fresh wrapper, never the function itself: cloudpickle pickles a function found at
            # `module.Cls.name` by reference, so handing out the very object would make every
            # worker import the class's module (which need not be importable there)
            def call(*args: Any, **kwargs: Any) -> Any:
                return value(*args, **kwargs)

            call.__name__ = value.__name__
            call.__doc__ = value.__doc__
            return call
        return value

    def __dir__(self) -> list[str]:
        return sorted(set(dir(self._cls)) | {"remote", "options", "bind"})

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        name = self._cls.__name__
        raise TypeError(f"Actors cannot be instantiated directly. Instead of '{name}()', use "
                        f"'{name}.remote()'.")

    def remote(self, *args: Any, **kwargs: Any) -> ActorHandle:
        return self._remote(args, kwargs, self._options)

    def options(self, **options: Any) -> _ActorClassWithOptions:
        O.validate(options, O.ACTOR_OPTIONS, f"actor class {self._cls.__qualname__}")
        _check_actor_options({**self._options, **options}, self._cls)
        return _ActorClassWithOptions(self, {**self._options, **options})

    def bind(self, *args: Any, **kwargs: Any) -> Any:
        from raylite.dag.class_node import ClassNode  # on first bind(): few programs use DAGs

        return ClassNode(self, args, kwargs, self._options)

    def _remote(self, args: Any = None, kwargs: dict | None = None, opts: dict | None = None,
                **actor_options: Any) -> ActorHandle:
        """Create the actor. Ray's spelling `Cls._remote(args=[...], kwargs={...}, num_cpus=1)`
        (used by libraries) is accepted: options by keyword."""
        if opts is None:
            O.validate(actor_options, O.ACTOR_OPTIONS, f"actor class {self._cls.__qualname__}")
            opts = {**self._options, **actor_options}
            _check_actor_options(opts, self._cls)
        args = tuple(args or ())
        kwargs = dict(kwargs or {})
        client = api.ensure_initialized()
        init = getattr(self._cls, "__init__", None)
        if init is not None and init is not object.__init__:
            try:
                inspect.signature(init).bind(None, *args, **kwargs)
            except TypeError as e:
                raise TypeError(f"{self._cls.__qualname__}.remote() got bad arguments: {e}") from None
            except ValueError:
                pass
        descriptor = self._export(client)
        opts = legacy_pg_options(opts)
        namespace = opts.get("namespace") or client.namespace
        name = opts.get("name") or ""
        lifetime = opts.get("lifetime")
        if lifetime is None:  # the job's JobConfig(default_actor_lifetime=...), wherever this runs
            from raylite._core.runtime_env.check import DEFAULT_ACTOR_LIFETIME

            lifetime = api.inherited_runtime_env().get(DEFAULT_ACTOR_LIFETIME)
        detached = lifetime == "detached"
        if detached and not name:
            pass  # Ray allows unnamed detached actors
        resources = O.resource_request(opts, default_cpus=0)
        if opts.get("num_cpus") is None:
            resources.pop("CPU", None)
        check_fits_group(opts.get("scheduling_strategy"), resources, self._cls.__qualname__)
        strategy, resources, capture_pg = capture_and_strategy(
            opts.get("scheduling_strategy"), resources, api.captured_placement_group(),
            opts.get("label_selector"), opts.get("fallback_strategy"))
        runtime_env = merge_runtime_env(api.inherited_runtime_env(), opts.get("runtime_env"))
        payload, arg_refs, _pinned = client.pack_args(args, kwargs, f"{self._cls.__qualname__}.__init__")
        max_concurrency = opts.get("max_concurrency") or (1000 if self._async else 1)
        actor_id = ActorID.from_random()
        spec = TaskSpec(
            task_id=client.new_task_id(), job_id=client.job_id, kind=KIND_ACTOR_CREATE, function=descriptor,
            args=payload, arg_refs=arg_refs, num_returns=0, owner_address=client.address,
            owner_worker_id=b"" if detached else client.worker_id, resources=resources, runtime_env=runtime_env,
            strategy=strategy, actor_id=actor_id, max_restarts=opts.get("max_restarts") or 0,
            max_task_retries=opts.get("max_task_retries") or 0, max_concurrency=max_concurrency,
            is_async=self._async, actor_name=name, namespace=namespace, detached=detached,
            method_meta=self._meta, capture_pg=capture_pg,
            concurrency_groups=dict(opts.get("concurrency_groups") or {}))
        reply = client.register_actor(spec, bool(opts.get("get_if_exists")))
        if reply.existed:
            existing = TaskSpec.from_wire(reply.spec)
            handle = ActorHandle(reply.actor_id, existing.function.qualname, existing.method_meta,
                                 existing.max_task_retries, owned=False)
        else:
            # Named or not, a non-detached actor ends with its creator's last handle, as in Ray;
            # handles from get_actor() are weak (they do not keep it alive)
            token = None if detached else client.actor_token(actor_id, spec.task_id)
            handle = ActorHandle(actor_id, self._cls.__qualname__, self._meta, spec.max_task_retries,
                                 owned=not detached, token=token)
        if handle._meta == self._meta:  # the same class: its signatures check calls made here
            handle._signatures = self._signatures
        return handle


class _ActorClassWithOptions:
    def __init__(self, actor_class: ActorClass, options: dict) -> None:
        self._actor_class = actor_class
        self._options = options

    def remote(self, *args: Any, **kwargs: Any) -> ActorHandle:
        return self._actor_class._remote(args, kwargs, self._options)

    def options(self, **options: Any) -> _ActorClassWithOptions:
        O.validate(options, O.ACTOR_OPTIONS, f"actor class {self._actor_class._cls.__qualname__}")
        _check_actor_options({**self._options, **options}, self._actor_class._cls)
        return _ActorClassWithOptions(self._actor_class, {**self._options, **options})

    def bind(self, *args: Any, **kwargs: Any) -> Any:
        from raylite.dag.class_node import ClassNode  # on first bind(): few programs use DAGs

        return ClassNode(self._actor_class, args, kwargs, self._options)


# actor id -> live handle objects in this process, for actors this process created unnamed
_handle_counts: dict[bytes, int] = {}
_escaped: set[bytes] = set()
# handle tokens pickled out of band (ActorHandle.__reduce__): kept for this process's lifetime
_pinned_tokens: set = set()
_counts_lock = threading.Lock()


# an actor call asks for no resources of its own (its actor holds them); one dict read by every
# call's spec, never changed
_CALL_RESOURCES: dict = {}


class ActorHandle:
    """A handle to an actor: `handle.method.remote(...)` calls it; pass it to other tasks freely."""

    def __init__(self, actor_id: bytes, class_name: str, method_meta: dict, max_task_retries: int = 0,
                 *, owned: bool = False, token: Any = None) -> None:
        self._actor_id = ActorID(actor_id)  # bytes, with Ray's .job_id
        self._class_name = class_name
        # shared by every call's spec (frozen): not one descriptor per call, and the task-event
        # buffer describes a burst of calls from the identity of its function and resources
        self._call_function = FunctionDescriptor("", class_name, b"")
        self._meta = dict(method_meta)
        self._max_task_retries = max_task_retries
        # A strong handle holds `token`, a ref to an object its actor's creator owns: the
        # ownership protocol counts those refs in every process (borrowers, running tasks'
        # arguments, stored objects), and the actor ends when the last one goes. Weak handles
        # (get_actor(), current_actor) hold none. `owned` without a token: a creator whose
        # client cannot count refs elsewhere (the Ray Client) counts its own handles here.
        self._token = token
        self._owned = owned and token is None
        # method -> signature, known where the class is (the creating process); empty elsewhere
        self._signatures: dict[str, inspect.Signature] = {}
        if self._owned:
            with _counts_lock:
                _handle_counts[self._actor_id] = _handle_counts.get(self._actor_id, 0) + 1

    def __del__(self) -> None:
        if not getattr(self, "_owned", False):
            return
        try:
            with _counts_lock:
                left = _handle_counts.get(self._actor_id, 1) - 1
                _handle_counts[self._actor_id] = left
                if left > 0 or self._actor_id in _escaped:
                    return
                del _handle_counts[self._actor_id]
            from raylite._core import runtime

            client = runtime.client()
            if client is not None and not client._closed:
                client.call_soon(client.actor_out_of_scope, self._actor_id)
        except Exception:  # noqa: BLE001  interpreter shutdown
            pass

    def __getattr__(self, name: str) -> ActorMethod:
        if name in _BUILTIN_METHODS:
            return ActorMethod(self, name, 1)
        if name.startswith("__") or name not in self._meta:
            raise AttributeError(f"'ActorHandle' object for actor {self._class_name} has no method "
                                 f"'{name}'. Its methods are: {', '.join(sorted(self._meta)) or 'none'}.")
        return ActorMethod(self, name, self._meta[name])

    def __dir__(self) -> list[str]:
        """The actor's methods and Ray's built-in ones (what an IDE completes on a handle)."""
        return sorted(set(self._meta) | {"__init__", "__ray_ready__", "__ray_call__", "__ray_terminate__"})

    def __reduce__(self):
        token = self._token
        if token is not None and contained_refs_sink() is None:
            # pickled where no ref is counted (cloudpickle.dumps, a file, another channel): the
            # copy may be loaded any time later, so the actor lives as long as this process
            _pinned_tokens.add(token)
            token = None
        elif token is None and self._owned:
            with _counts_lock:
                _escaped.add(self._actor_id)
        return (_rebuild_handle, (self._actor_id, self._class_name, self._meta, self._max_task_retries,
                                  _portable_signatures(getattr(self, "_signatures", {})), token))

    def __repr__(self) -> str:
        return f"Actor({self._class_name}, {self._actor_id.hex()})"

    def __hash__(self) -> int:
        return hash(self._actor_id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ActorHandle) and other._actor_id == self._actor_id

    @property
    def _ray_actor_id(self) -> ActorID:
        return ActorID(self._actor_id)

    def _call(self, method_name: str, args: tuple, kwargs: dict, opts: dict) -> Any:
        client = api.ensure_initialized()
        payload, arg_refs, pinned = client.pack_args(args, kwargs, f"{self._class_name}.{method_name}")
        nr = opts.get("num_returns", self._meta.get(method_name, 1))
        spec = TaskSpec(
            task_id=client.new_task_id(), job_id=client.job_id, kind=KIND_ACTOR_CALL,
            function=self._call_function, args=payload, arg_refs=arg_refs,
            num_returns=_wire_returns(nr), owner_address=client.address, owner_worker_id=client.worker_id,
            resources=_CALL_RESOURCES, name=opts.get("name") or "", actor_id=self._actor_id, method_name=method_name,
            max_task_retries=opts.get("max_task_retries", self._max_task_retries),
            concurrency_group=opts.get("concurrency_group") or "", parent_task_id=api.current_task_id())
        token = self._token
        return client.submit_actor_task(spec, pinned, (token._id,) if token is not None else ())


def _positional_fits(handle: ActorHandle, name: str, sig: inspect.Signature, n: int) -> bool:
    """Fast path of the call check (it runs on every .remote()): a call with `n` positional
    arguments only, for a signature of plain parameters, fits when required <= n <= all
    (cached per handle and method)."""
    cache = handle.__dict__.setdefault("_arity", {})
    arity = cache.get(name, False)
    if arity is False:
        arity = cache[name] = plain_arity(sig)
    return arity is not None and arity[0] <= n <= arity[1]


def _portable_signatures(signatures: dict[str, inspect.Signature]) -> dict[str, list]:
    """Signatures as plain data for a handle sent elsewhere: each parameter's name, kind and
    whether it has a default (binding needs no more; defaults may not pickle)."""
    return {name: [[p.name, int(p.kind), p.default is not p.empty] for p in sig.parameters.values()]
            for name, sig in signatures.items()}


def _signatures_from(portable: dict[str, list]) -> dict[str, inspect.Signature]:
    out = {}
    for name, params in portable.items():
        out[name] = inspect.Signature([
            inspect.Parameter(pname, inspect._ParameterKind(kind), default=None if has_default else inspect.Parameter.empty)
            for pname, kind, has_default in params])
    return out


def _rebuild_handle(actor_id: bytes, class_name: str, meta: dict, max_task_retries: int,
                    signatures: dict[str, list] | None = None, token: Any = None) -> ActorHandle:
    handle = ActorHandle(actor_id, class_name, meta, max_task_retries, token=token)
    if signatures:
        handle._signatures = _signatures_from(signatures)
    return handle


class ActorMethod:
    def __init__(self, handle: ActorHandle, name: str, num_returns: Any, options: dict | None = None) -> None:
        self._handle = handle
        self._name = name
        self._num_returns = num_returns
        self._options = options or {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"Actor methods cannot be called directly. Instead of running "
                        f"'object.{self._name}()', try 'object.{self._name}.remote()'.")

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        sig = getattr(self._handle, "_signatures", {}).get(self._name)
        if sig is not None and not (not kwargs and _positional_fits(self._handle, self._name, sig, len(args))):
            try:
                sig.bind(*args, **kwargs)
            except TypeError as e:
                raise TypeError(f"{self._handle._class_name}.{self._name}.remote() got bad arguments: {e}") from None
        return self._handle._call(self._name, args, kwargs, {"num_returns": self._num_returns, **self._options})

    def options(self, **options: Any) -> ActorMethod:
        O.validate(options, O.METHOD_OPTIONS, f"actor method {self._name}")
        nr = options.get("num_returns", self._num_returns)
        if nr is None:  # the method's default: a generator method (streaming by default) streams
            default = self._handle._meta.get(self._name, 1)
            nr = "streaming" if default in ("streaming", "dynamic") else 1
        return ActorMethod(self._handle, self._name, nr, {**self._options, **options, "num_returns": nr})

    def bind(self, *args: Any, **kwargs: Any) -> Any:
        from raylite.dag.class_node import ClassMethodNode  # on first bind(): few programs use DAGs

        return ClassMethodNode(self._handle, self._name, args, kwargs, self._options)


def get_actor(name: str, namespace: str | None = None) -> Any:
    if not isinstance(name, str) or not name:
        raise ValueError("get_actor() needs the actor's name (a non-empty string).")
    client = api.ensure_initialized()
    ns = namespace if namespace is not None else client.namespace
    reply = client.named_actor(name, ns)
    if not reply.actor_id:
        raise ValueError(f"Failed to look up actor with name {name!r} in namespace {ns!r}. It was never "
                         "created, it died, or it lives in another namespace (pass namespace=...).")
    spec = TaskSpec.from_wire(reply.spec)
    return ActorHandle(reply.actor_id, spec.function.qualname, spec.method_meta, spec.max_task_retries)


def kill(actor: Any, *, no_restart: bool = True) -> None:
    if not isinstance(actor, ActorHandle):
        raise ValueError(f"raylite.kill() only supports actor handles; got {type(actor).__name__}. "
                         "Use raylite.cancel() for tasks.")
    api.ensure_initialized().kill_actor(actor._actor_id, no_restart)


def exit_actor() -> None:
    """Stop the current actor from inside one of its methods (no restart)."""
    import os

    from raylite._core import runtime

    worker = runtime.worker()
    if worker is None or worker.actor_spec is None:
        raise TypeError("exit_actor() can only be called inside an actor.")
    client = runtime.client()
    worker.exiting = True  # no call that has not started yet starts now
    worker.run_exit_handlers()  # before the head hears of it (the node may end us after that)
    try:
        client.exit_actor(worker.actor_spec.actor_id, timeout_s=5)
    except Exception:  # noqa: BLE001
        pass
    worker.exit_gracefully()  # atexit handlers run, as in Ray
    os._exit(0)
