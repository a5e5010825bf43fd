"""DAGNode: a task, actor or actor call recorded by `.bind()`, run later by `.execute()`.

A node stores what was bound (positional args, keyword args, options) and runs nothing until
`execute(*args, **kwargs)` is called on the node that is the DAG's output. Execution visits the
nodes below it children first; each node is run once per `execute` even if several nodes use
it, and every node found inside the bound arguments (also nested in lists, tuples and dicts) is
replaced by what it produced: an ObjectRef for task and actor-call nodes, an actor handle for
class nodes, the caller's input for input nodes. Core then resolves top-level ObjectRef
arguments to values before the task runs, exactly as for `.remote()` calls.

A node is a spec (immutable after binding); what one `execute` produced lives in an
`_Execution`, never on the nodes, so the same DAG can be executed many times, even at once.
"""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Callable
from typing import Any

from raylite.object_ref import ObjectRef


class DAGNode:
    """Base of every node. Subclasses define `_execute_impl` (what running the node does)."""

    def __init__(self, args: tuple[Any, ...], kwargs: dict[str, Any],
                 options: dict[str, Any] | None = None,
                 other_args_to_resolve: dict[str, Any] | None = None) -> None:
        self._bound_args: tuple[Any, ...] = tuple(args)
        self._bound_kwargs: dict[str, Any] = dict(kwargs)
        self._bound_options: dict[str, Any] = dict(options or {})
        self._bound_other_args_to_resolve: dict[str, Any] = dict(other_args_to_resolve or {})
        self._stable_uuid = uuid.uuid4().hex

    # --- what was bound -----------------------------------------------------------------------

    def get_args(self) -> tuple[Any, ...]:
        """The positional arguments bound to this node."""
        return self._bound_args

    def get_kwargs(self) -> dict[str, Any]:
        """The keyword arguments bound to this node."""
        return dict(self._bound_kwargs)

    def get_options(self) -> dict[str, Any]:
        """The task or actor options this node will run with."""
        return dict(self._bound_options)

    def get_other_args_to_resolve(self) -> dict[str, Any]:
        """Further values (besides the arguments) that may hold nodes to resolve first."""
        return dict(self._bound_other_args_to_resolve)

    def get_stable_uuid(self) -> str:
        """An id for this node that stays the same for its whole life."""
        return self._stable_uuid

    # --- running ------------------------------------------------------------------------------

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        """Run the DAG that ends at this node; the arguments feed its `InputNode`.

        Returns what this node produced: an ObjectRef for a task or actor-call node, an actor
        handle for a class node, a list of those for a `MultiOutputNode`.
        """
        run = _Execution(args, kwargs)
        result = run.run(self)
        run.keep_actors_alive_with(result)
        return result

    def _execute_impl(self, run: _Execution) -> Any:
        raise NotImplementedError(f"{type(self).__name__} cannot be executed")

    def _child_nodes(self) -> list[DAGNode]:
        """Nodes this one needs the results of, found anywhere in what was bound."""
        found: list[DAGNode] = []
        _walk((self._bound_args, self._bound_kwargs, self._bound_other_args_to_resolve),
              found.append)
        return found

    def traverse_and_apply(self, fn: Callable[[DAGNode], Any]) -> None:
        """Call `fn` once on every node of the DAG below and including this one."""
        seen: set[int] = set()
        stack: list[DAGNode] = [self]
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            fn(node)
            stack.extend(node._child_nodes())

    def experimental_compile(self, *args: Any, **kwargs: Any) -> Any:
        """Compile the DAG that ends here (see raylite.dag.compiled_dag_node). Only a DAG that
        ends in an actor method call or a MultiOutputNode of them compiles."""
        raise TypeError(f"A compiled graph must end in an actor method call or a MultiOutputNode of "
                        f"them, not {type(self).__name__}. Call .execute() on this DAG instead.")

    def _compiled_call(self) -> tuple[Any, str] | None:
        """(actor, method name) when this node is an actor method call a compiled graph can run."""
        return None

    def __reduce__(self) -> Any:
        raise TypeError(f"{type(self).__name__} cannot be serialized: a DAG node is a recipe that "
                        "lives in the process that built it. Pass the result of .execute() instead.")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._describe()})"

    def _describe(self) -> str:
        return f"args={self._bound_args!r}, kwargs={self._bound_kwargs!r}"


class _Execution:
    """The state of one `execute` call: the caller's input and each node's result so far."""

    def __init__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.input_args = args
        self.input_kwargs = kwargs
        self._results: dict[int, Any] = {}
        self._input_node: DAGNode | None = None
        self._actors: list[Any] = []

    def run(self, root: DAGNode) -> Any:
        """Run every node below `root` once, children first; return `root`'s result.

        Iterative depth-first walk, so long chains do not hit Python's recursion limit. A node
        whose "exit" marker is still on the stack is an ancestor of the one being visited;
        meeting it again means the arguments form a cycle.
        """
        stack: list[tuple[DAGNode, bool]] = [(root, False)]
        on_path: set[int] = set()
        while stack:
            node, children_done = stack.pop()
            key = id(node)
            if children_done:
                on_path.discard(key)
                self._results[key] = node._execute_impl(self)
                continue
            if key in self._results:
                continue
            if key in on_path:
                raise ValueError(f"The DAG has a cycle through {node!r}: a node's arguments "
                                 "(perhaps a list changed after .bind()) contain the node itself.")
            on_path.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in reversed(node._child_nodes())
                         if id(child) not in self._results)
        return self._results[id(root)]

    def result_of(self, node: DAGNode) -> Any:
        return self._results[id(node)]

    def resolve(self, value: Any) -> Any:
        """`value` with every node in it (also nested in lists, tuples, dicts) replaced by its
        result from this execution."""
        if isinstance(value, DAGNode):
            return self._results[id(value)]
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if isinstance(value, tuple):
            items = [self.resolve(v) for v in value]
            return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
        if isinstance(value, dict):
            return {k: self.resolve(v) for k, v in value.items()}
        return value

    def register_input_node(self, node: DAGNode) -> None:
        if self._input_node is not None and self._input_node is not node:
            raise ValueError("Each DAG should only have one unique InputNode: this one uses two. "
                             "Build the whole DAG inside one `with InputNode() as inp:` block.")
        self._input_node = node

    def record_actor(self, handle: Any) -> None:
        self._actors.append(handle)

    def keep_actors_alive_with(self, result: Any) -> None:
        """Actors created by this execution live as long as any ObjectRef it returned.

        Their handles are otherwise dropped when `execute` returns, and an actor whose last
        handle is gone is stopped, which would lose the calls still queued on it.
        """
        if not self._actors:
            return
        actors = tuple(self._actors)
        stack = [result]
        while stack:
            item = stack.pop()
            if isinstance(item, (list, tuple)):
                stack.extend(item)
            elif isinstance(item, ObjectRef):
                weakref.finalize(item, _release, actors)


def _release(actors: tuple[Any, ...]) -> None:
    """Called when a result ref dies; dropping the last reference to `actors` ends them."""
    del actors


def _walk(value: Any, visit: Callable[[DAGNode], Any]) -> None:
    """Call `visit` on each node in `value`, looking inside lists, tuples and dicts."""
    if isinstance(value, DAGNode):
        visit(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _walk(v, visit)
    elif isinstance(value, dict):
        for v in value.values():
            _walk(v, visit)


__all__ = ["DAGNode"]
