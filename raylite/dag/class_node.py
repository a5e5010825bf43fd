"""ClassNode and ClassMethodNode: an actor and calls on it, recorded by `.bind()`.

`Actor.bind(...)` makes a ClassNode; `class_node.method.bind(...)` a ClassMethodNode that calls
the actor that ClassNode creates. A live handle's `handle.method.bind(...)` also makes a
ClassMethodNode, which calls that existing actor. Each `execute` of a DAG creates fresh actors
for its ClassNodes (all method nodes of one ClassNode share that one actor); to keep an actor's
state across executions, create it with `.remote()` and bind its handle's methods instead.

As in Ray, the method calls bound on one ClassNode form a chain in bind order: each call node
also depends on the call bound just before it on the same ClassNode. So executing a DAG that
uses `a1.get.bind()` first runs every call bound earlier on `a1`, such as `a1.inc.bind(2)`,
even though no node uses their results: they are the actor's state changes, and the DAG's
answer depends on them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from raylite.dag.compiled_dag_node import CompiledDAG, compile_dag
from raylite.dag.dag_node import DAGNode

if TYPE_CHECKING:
    from raylite.dag.dag_node import _Execution


PARENT_CLASS_NODE_KEY = "parent_class_node"
PREV_CLASS_METHOD_CALL_KEY = "prev_class_method_call"


class ClassNode(DAGNode):
    """`Actor.bind(*args, **kwargs)`: on execute, starts the actor and yields its handle."""

    def __init__(self, cls: Any, cls_args: tuple[Any, ...], cls_kwargs: dict[str, Any],
                 cls_options: dict[str, Any] | None = None,
                 other_args_to_resolve: dict[str, Any] | None = None) -> None:
        self._body = cls
        super().__init__(cls_args, cls_kwargs, cls_options, other_args_to_resolve)
        # the call bound last on this actor; the next one bound runs after it (Ray's semantics)
        self._last_call: ClassMethodNode | None = None

    def __getattr__(self, method_name: str) -> _UnboundClassMethodNode:
        # Only called for names the node itself lacks: those are the actor's methods. Private
        # names are refused so copy/pickle probes do not turn into method nodes.
        if method_name.startswith("_"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {method_name!r}")
        if method_name == "bind":
            raise AttributeError(".bind() cannot be used again on a ClassNode: it is already "
                                 "bound. Bind a method instead, e.g. node.method.bind(x).")
        return _UnboundClassMethodNode(self, method_name, {})

    def options(self, **options: Any) -> ClassNode:
        """The same actor with these actor options added (e.g. `num_cpus`, `max_concurrency`)."""
        return ClassNode(self._body, self._bound_args, self._bound_kwargs,
                         {**self._bound_options, **options}, self._bound_other_args_to_resolve)

    def _execute_impl(self, run: _Execution) -> Any:
        args = run.resolve(self._bound_args)
        kwargs = run.resolve(self._bound_kwargs)
        target = self._body.options(**self._bound_options) if self._bound_options else self._body
        handle = target.remote(*args, **kwargs)
        run.record_actor(handle)
        return handle

    def _describe(self) -> str:
        return f"{getattr(self._body, '__qualname__', self._body)!s}, {super()._describe()}"


class _UnboundClassMethodNode:
    """`class_node.method`: waits for `.bind(...)` (or `.options(...)` first)."""

    def __init__(self, actor: ClassNode, method_name: str, options: dict[str, Any]) -> None:
        self._actor = actor
        self._method_name = method_name
        self._options = options

    def bind(self, *args: Any, **kwargs: Any) -> ClassMethodNode:
        previous = self._actor._last_call
        other = {} if previous is None else {PREV_CLASS_METHOD_CALL_KEY: previous}
        node = ClassMethodNode(self._actor, self._method_name, args, kwargs, self._options, other)
        self._actor._last_call = node
        return node

    def options(self, **options: Any) -> _UnboundClassMethodNode:
        return _UnboundClassMethodNode(self._actor, self._method_name,
                                       {**self._options, **options})

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"Actor methods in a DAG cannot be called directly. Instead of "
                        f"'{self._method_name}()', use '{self._method_name}.bind()'.")


class ClassMethodNode(DAGNode):
    """A call of `method_name` on an actor: either a ClassNode of the same DAG (the actor is
    created by the execution) or a live actor handle."""

    def __init__(self, actor: Any, method_name: str, method_args: tuple[Any, ...],
                 method_kwargs: dict[str, Any], method_options: dict[str, Any] | None = None,
                 other_args_to_resolve: dict[str, Any] | None = None) -> None:
        self._method_name = method_name
        other = dict(other_args_to_resolve or {})
        # Kept with the other values to resolve, so a ClassNode parent is run first.
        other[PARENT_CLASS_NODE_KEY] = actor
        super().__init__(method_args, method_kwargs, method_options, other)

    @property
    def _parent(self) -> Any:
        return self._bound_other_args_to_resolve[PARENT_CLASS_NODE_KEY]

    def options(self, **options: Any) -> ClassMethodNode:
        """The same call with these method options added (e.g. `num_returns`, `name`)."""
        other = {k: v for k, v in self._bound_other_args_to_resolve.items()
                 if k != PARENT_CLASS_NODE_KEY}
        return ClassMethodNode(self._parent, self._method_name, self._bound_args,
                               self._bound_kwargs, {**self._bound_options, **options}, other)

    def _execute_impl(self, run: _Execution) -> Any:
        handle = run.resolve(self._parent)
        args = run.resolve(self._bound_args)
        kwargs = run.resolve(self._bound_kwargs)
        method = getattr(handle, self._method_name)
        if self._bound_options:
            method = method.options(**self._bound_options)
        return method.remote(*args, **kwargs)

    def _compiled_call(self) -> tuple[Any, str]:
        return self._parent, self._method_name

    def experimental_compile(self, _submit_timeout: float | None = None, _buffer_size_bytes: int | None = None,
                             enable_asyncio: bool = False, _max_inflight_executions: int | None = None,
                             **kwargs: Any) -> CompiledDAG:
        """Set this DAG up once on its actors and return a CompiledDAG to `execute` many times
        (see raylite.dag.compiled_dag_node)."""
        return compile_dag([self], True, enable_asyncio=enable_asyncio, _submit_timeout=_submit_timeout,
                           _max_inflight_executions=_max_inflight_executions, **kwargs)

    def _describe(self) -> str:
        return f"{self._method_name}, {super()._describe()}"
