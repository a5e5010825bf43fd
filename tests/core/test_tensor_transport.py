"""Custom tensor transports (`ray.experimental.register_tensor_transport`), as Ray's
direct-transport docs write one: the interface imports and subclasses under Ray's names, the
registration is checked, and a method marked with the transport hands its value to another
actor (through the object store in raylite)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import raylite as ray
from raylite.experimental import (
    CommunicatorMetadata,
    TensorTransportManager,
    TensorTransportMetadata,
    register_tensor_transport,
)
from raylite.experimental.tensor_transport import registered_transport


class InMemoryTransport(TensorTransportManager):
    def tensor_transport_backend(self):
        return "in_memory_test"

    @staticmethod
    def is_one_sided():
        return True

    @staticmethod
    def can_abort_transport():
        return False

    def actor_has_tensor_transport(self, actor):
        return True

    def extract_tensor_transport_metadata(self, obj_id, rdt_object):
        return TensorTransportMetadata(tensor_meta=[(t.shape, t.dtype) for t in rdt_object], tensor_device="cpu")

    def get_communicator_metadata(self, src_actor, dst_actor, backend=None):
        return CommunicatorMetadata()

    def recv_multiple_tensors(self, obj_id, tensor_transport_metadata, communicator_metadata, target_buffers=None):
        return []

    def send_multiple_tensors(self, tensors, tensor_transport_metadata, communicator_metadata):
        raise NotImplementedError

    def garbage_collect(self, obj_id, tensor_transport_meta, tensors):
        pass

    def abort_transport(self, obj_id, communicator_metadata):
        pass


def test_registration_is_checked_and_recorded():
    register_tensor_transport("in_memory_test", ["cpu"], InMemoryTransport, np.ndarray)
    entry = registered_transport("IN_MEMORY_TEST")
    assert entry is not None and entry.manager_class is InMemoryTransport and entry.devices == ("cpu",)
    with pytest.raises(ValueError, match="already registered"):
        register_tensor_transport("In_Memory_Test", ["cpu"], InMemoryTransport, np.ndarray)
    with pytest.raises(ValueError, match="TensorTransportManager"):
        register_tensor_transport("not_a_manager", ["cpu"], dict, np.ndarray)
    meta = TensorTransportMetadata(tensor_meta=[((3,), np.dtype("int64"))])
    assert meta.tensor_device is None


def test_interface_stays_abstract():
    with pytest.raises(TypeError):
        TensorTransportManager()
    InMemoryTransport()  # every abstract method implemented


def test_a_method_marked_with_a_transport_hands_its_value_on(cluster):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # raylite says it moves the value through the object store

        @ray.remote
        class Holder:
            @ray.method(tensor_transport="in_memory_test")
            def echo(self, data):
                return data

            def total(self, data):
                return int(data.sum())

    a, b = Holder.remote(), Holder.remote()
    ref = a.echo.remote(np.array([1, 2, 3]))
    assert ray.get(b.total.remote(ref)) == 6
