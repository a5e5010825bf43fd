"""MultiOutputNode: a DAG with several outputs; `execute` returns a list of their results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from raylite.dag.compiled_dag_node import CompiledDAG, compile_dag
from raylite.dag.dag_node import DAGNode

if TYPE_CHECKING:
    from raylite.dag.dag_node import _Execution


class MultiOutputNode(DAGNode):
    """`MultiOutputNode([a, b])`: executing it runs both (sharing common nodes) and returns
    `[ref_a, ref_b]`."""

    def __init__(self, args: Sequence[Any],
                 other_args_to_resolve: dict[str, Any] | None = None) -> None:
        if isinstance(args, DAGNode) or not isinstance(args, (list, tuple)):
            raise TypeError("MultiOutputNode takes a list of nodes, e.g. MultiOutputNode([a, b]).")
        super().__init__(tuple(args), {}, {}, other_args_to_resolve)

    def _execute_impl(self, run: _Execution) -> list[Any]:
        return [run.resolve(arg) for arg in self._bound_args]

    def experimental_compile(self, _submit_timeout: float | None = None, _buffer_size_bytes: int | None = None,
                             enable_asyncio: bool = False, _max_inflight_executions: int | None = None,
                             **kwargs: Any) -> CompiledDAG:
        """Compile the DAG; `execute` then returns one CompiledDAGRef per output, in order."""
        outputs = list(self._bound_args)
        if not outputs or not all(isinstance(o, DAGNode) for o in outputs):
            raise TypeError("A compiled MultiOutputNode takes a non-empty list of actor method calls.")
        return compile_dag(outputs, False, enable_asyncio=enable_asyncio, _submit_timeout=_submit_timeout,
                           _max_inflight_executions=_max_inflight_executions, **kwargs)
