"""Ray's custom tensor transports (`ray.experimental.register_tensor_transport`), by interface.

In Ray, an actor method marked `@ray.method(tensor_transport="name")` keeps the tensors it
returns in the actor and moves them to a consumer through the named transport (GPU to GPU,
shared memory, ...). raylite has no such out-of-band path: the value of such a method travels
through the object store like any other, so the program sees the same values, and a transport
registered here is checked and recorded but its methods are never called. The classes keep
Ray's names, fields and abstract methods, so a transport written for Ray imports, subclasses
and registers unchanged.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any


@dataclass
class CommunicatorMetadata:
    """What a transport needs to know about the two actors of one transfer (none by default)."""


@dataclass
class TensorTransportMetadata:
    """The (shape, dtype) of each tensor of one object, and the device they are on."""

    tensor_meta: list[tuple[Any, Any]]
    tensor_device: str | None = None


class TensorTransportManager(ABC):
    """The interface a custom tensor transport implements (the same abstract methods as Ray's)."""

    @abstractmethod
    def tensor_transport_backend(self) -> str:
        """The transport's name."""

    @staticmethod
    @abstractmethod
    def is_one_sided() -> bool:
        """True when the receiver alone can fetch the tensors (no send on the sender's side)."""

    @staticmethod
    @abstractmethod
    def can_abort_transport() -> bool:
        """Whether a transfer under way can be aborted."""

    @abstractmethod
    def actor_has_tensor_transport(self, actor: Any) -> bool:
        """Whether `actor` can use this transport."""

    @abstractmethod
    def extract_tensor_transport_metadata(self, obj_id: str, rdt_object: list[Any]) -> TensorTransportMetadata:
        """On the producing actor: describe (and keep) the tensors of object `obj_id`."""

    @abstractmethod
    def get_communicator_metadata(self, src_actor: Any, dst_actor: Any,
                                  backend: str | None = None) -> CommunicatorMetadata:
        """What a transfer from `src_actor` to `dst_actor` needs."""

    @abstractmethod
    def recv_multiple_tensors(self, obj_id: str, tensor_transport_metadata: TensorTransportMetadata,
                              communicator_metadata: CommunicatorMetadata,
                              target_buffers: list[Any] | None = None) -> list[Any]:
        """On the consuming actor: receive the tensors of `obj_id`."""

    @abstractmethod
    def send_multiple_tensors(self, tensors: list[Any], tensor_transport_metadata: TensorTransportMetadata,
                              communicator_metadata: CommunicatorMetadata) -> None:
        """On the producing actor: send the tensors (two-sided transports)."""

    @abstractmethod
    def garbage_collect(self, obj_id: str, tensor_transport_meta: TensorTransportMetadata,
                        tensors: list[Any]) -> None:
        """The object is no longer referenced: release what the transport holds for it."""

    @abstractmethod
    def abort_transport(self, obj_id: str, communicator_metadata: CommunicatorMetadata) -> None:
        """Abort a transfer under way."""


@dataclass(frozen=True)
class RegisteredTransport:
    manager_class: type[TensorTransportManager]
    devices: tuple[str, ...]
    data_type: type


_registry: dict[str, RegisteredTransport] = {}
_registry_lock = threading.Lock()


def register_tensor_transport(transport_name: str, devices: list[str],
                              transport_manager_class: type[TensorTransportManager], data_type: type) -> None:
    """Register a transport under `transport_name` (case-insensitive, as in Ray).

    Raises ValueError when the name is taken or the class is not a TensorTransportManager.
    In raylite the values of methods that name it still travel through the object store.
    """
    if not (isinstance(transport_manager_class, type) and issubclass(transport_manager_class, TensorTransportManager)):
        raise ValueError(f"transport_manager_class {getattr(transport_manager_class, '__name__', transport_manager_class)!r} "
                         "must be a subclass of ray.experimental.TensorTransportManager.")
    name = transport_name.upper()
    with _registry_lock:
        if name in _registry:
            raise ValueError(f"Transport {name} already registered.")
        _registry[name] = RegisteredTransport(transport_manager_class, tuple(devices), data_type)


def registered_transport(transport_name: str) -> RegisteredTransport | None:
    """The transport registered under this name in this process, if any."""
    return _registry.get(transport_name.upper())
