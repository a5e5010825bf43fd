"""MultiOutputNode: a DAG with several outputs; `execute` returns a list of their results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

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
