"""FunctionNode: a remote function call recorded by `f.bind(...)`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from raylite.dag.dag_node import DAGNode

if TYPE_CHECKING:
    from raylite.dag.dag_node import _Execution


class FunctionNode(DAGNode):
    """`f.bind(*args, **kwargs)`: on execute, `f.options(**options).remote(*args, **kwargs)`."""

    def __init__(self, func_body: Any, func_args: tuple[Any, ...], func_kwargs: dict[str, Any],
                 func_options: dict[str, Any] | None = None,
                 other_args_to_resolve: dict[str, Any] | None = None) -> None:
        self._body = func_body
        super().__init__(func_args, func_kwargs, func_options, other_args_to_resolve)

    def options(self, **options: Any) -> FunctionNode:
        """The same call with these task options added (e.g. `num_cpus`, `name`)."""
        return FunctionNode(self._body, self._bound_args, self._bound_kwargs,
                            {**self._bound_options, **options},
                            self._bound_other_args_to_resolve)

    def _execute_impl(self, run: _Execution) -> Any:
        args = run.resolve(self._bound_args)
        kwargs = run.resolve(self._bound_kwargs)
        target = self._body.options(**self._bound_options) if self._bound_options else self._body
        return target.remote(*args, **kwargs)

    def _describe(self) -> str:
        return f"{getattr(self._body, '__qualname__', self._body)!s}, {super()._describe()}"
