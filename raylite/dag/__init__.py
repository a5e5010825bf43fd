"""raylite.dag: the lazy DAG API (Ray's names and paths).

`.bind()` on a remote function, an actor class or an actor method records a call instead of
making it; `.execute(*inputs)` on the last node runs the whole graph and returns ObjectRefs.

    with InputNode() as inp:
        dag = add.bind(double.bind(inp), 1)
    raylite.get(dag.execute(5))   # 11

A DAG of calls on existing actors can also be compiled once and executed many times over
pre-connected channels, with no task submission per call: `dag.experimental_compile()`
(see `compiled_dag_node`).
"""

from raylite.dag.class_node import (
    PARENT_CLASS_NODE_KEY,
    PREV_CLASS_METHOD_CALL_KEY,
    ClassMethodNode,
    ClassNode,
)
from raylite.dag.compiled_dag_node import CompiledDAG
from raylite.dag.context import DAGContext
from raylite.dag.dag_node import DAGNode
from raylite.dag.function_node import FunctionNode
from raylite.dag.input_node import DAGInputData, InputAttributeNode, InputNode
from raylite.dag.output_node import MultiOutputNode

__all__ = [
    "ClassMethodNode", "ClassNode", "CompiledDAG", "DAGContext", "DAGInputData", "DAGNode", "FunctionNode",
    "InputAttributeNode", "InputNode", "MultiOutputNode", "PARENT_CLASS_NODE_KEY",
    "PREV_CLASS_METHOD_CALL_KEY",
]
