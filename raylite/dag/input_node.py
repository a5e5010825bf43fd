"""InputNode: the placeholder for what the caller passes to `execute(...)`.

    with InputNode() as inp:
        dag = combine.bind(a.forward.bind(inp[0]), b.forward.bind(inp.x))
    dag.execute(1, x=2)          # inp[0] -> 1, inp.x -> 2

What `inp` stands for at execute time:
  * exactly one positional argument and no keywords: that argument itself, so `inp[0]`,
    `inp["k"]` and `inp.k` index into it (`execute([1, 2])`, `execute({"k": 1})`, `execute(obj)`);
  * otherwise a `DAGInputData` of all of them: `inp[i]` is the i-th positional argument and
    `inp.k` / `inp["k"]` the keyword argument `k`.
A DAG has at most one InputNode; using two in one DAG is an error at execute time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from raylite.dag.dag_node import DAGNode

if TYPE_CHECKING:
    from raylite.dag.dag_node import _Execution


class DAGInputData:
    """All the arguments of one `execute(...)` call, when there is not exactly one."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._args = list(args)
        self._kwargs = dict(kwargs)

    def __getitem__(self, key: int | str) -> Any:
        if isinstance(key, int):
            try:
                return self._args[key]
            except IndexError:
                raise IndexError(f"The DAG reads positional input {key}, but execute() got "
                                 f"{len(self._args)} positional arguments.") from None
        try:
            return self._kwargs[key]
        except KeyError:
            raise KeyError(f"The DAG reads keyword argument {key!r}, but execute() got "
                           f"{sorted(self._kwargs) or 'none'}.") from None

    def __getattr__(self, key: str) -> Any:
        if key.startswith("_"):
            raise AttributeError(key)
        try:
            return self._kwargs[key]
        except KeyError:
            raise AttributeError(f"The DAG reads keyword argument {key!r}, but execute() got "
                                 f"{sorted(self._kwargs) or 'none'}.") from None

    def __repr__(self) -> str:
        return f"DAGInputData(args={self._args!r}, kwargs={self._kwargs!r})"


class InputNode(DAGNode):
    """The DAG's entry point; use it as a context manager while building the DAG."""

    def __init__(self, *args: Any, input_type: Any = None,
                 _other_args_to_resolve: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if args or kwargs:
            raise ValueError("InputNode() takes no data: give the DAG's input to "
                             "dag.execute(...) instead.")
        self.input_type = input_type
        super().__init__((), {}, {}, _other_args_to_resolve)

    def __enter__(self) -> InputNode:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        return None

    def __getitem__(self, key: int | str) -> InputAttributeNode:
        if not isinstance(key, (int, str)):
            raise TypeError(f"InputNode can be indexed by int or str only, got {type(key).__name__}")
        return InputAttributeNode(self, key, "__getitem__")

    def __getattr__(self, key: str) -> InputAttributeNode:
        # Only reached for names InputNode lacks. Private names are refused so that copy and
        # pickle probes (`__deepcopy__`, `__getstate__`, ...) behave normally.
        if key.startswith("_"):
            raise AttributeError(f"'InputNode' object has no attribute {key!r}")
        return InputAttributeNode(self, key, "__getattr__")

    def _execute_impl(self, run: _Execution) -> Any:
        run.register_input_node(self)
        if len(run.input_args) == 1 and not run.input_kwargs:
            return run.input_args[0]
        return DAGInputData(*run.input_args, **run.input_kwargs)

    def _describe(self) -> str:
        return ""


class InputAttributeNode(DAGNode):
    """One part of the DAG's input: `inp[key]` or `inp.key` (see the module docstring)."""

    def __init__(self, dag_input_node: DAGNode, key: int | str, accessor_method: str) -> None:
        if accessor_method not in ("__getitem__", "__getattr__"):
            raise ValueError(f"accessor_method must be '__getitem__' or '__getattr__', "
                             f"got {accessor_method!r}")
        self._key = key
        self._accessor_method = accessor_method
        super().__init__((), {}, {}, {"dag_input_node": dag_input_node})

    @property
    def key(self) -> int | str:
        return self._key

    def __getitem__(self, key: int | str) -> InputAttributeNode:
        """`inp[0]["x"]`: index further into the part of the input."""
        return InputAttributeNode(self, key, "__getitem__")

    def _execute_impl(self, run: _Execution) -> Any:
        data = run.resolve(self._bound_other_args_to_resolve["dag_input_node"])
        if isinstance(data, DAGInputData):
            return data[self._key]
        if self._accessor_method == "__getattr__":
            return getattr(data, str(self._key))
        return data[self._key]

    def _describe(self) -> str:
        sep = "." if self._accessor_method == "__getattr__" else ""
        return f"input{sep}{self._key}" if sep else f"input[{self._key!r}]"
