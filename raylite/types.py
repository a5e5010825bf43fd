"""`ray.types.ObjectRef`: the generic type for annotations (`ObjectRef[int]`), as in Ray, where it
is a typing-only class apart from the runtime ref type (`raylite.ObjectRef`). vLLM's Ray executor
imports it."""

from typing import Generic, TypeVar

T = TypeVar("T")


class ObjectRef(Generic[T]):
    """For type annotations only: a ref to a value of type T. Refs at run time are
    `raylite.ObjectRef` instances."""


__all__ = ["ObjectRef"]
