"""Every public error survives pickling (how errors cross processes) with its message and
fields unchanged: an error whose constructor formats its message must not be rebuilt from
that message ("Object Object ... was lost was lost")."""

from __future__ import annotations

import pickle

import pytest

import raylite.exceptions as E

# keyword arguments to build each error with, where it takes any beyond the message
SAMPLES = {
    "RayTaskError": {"function_name": "f", "traceback_str": "Traceback: ...", "pid": 7, "ip": "127.0.0.1"},
    "TaskCancelledError": {"task_id": "ab12"},
    "RayActorError": {"message": "it died", "actor_id": "cd34"},
}
_LOST = {"object_ref_hex": "00ff" * 5, "reason": "node 1234abcd died holding its only copy"}


def _sample(cls: type) -> BaseException:
    if issubclass(cls, E.ObjectLostError):
        return cls(**_LOST)
    for name in (c.__name__ for c in cls.__mro__):
        if name in SAMPLES:
            return cls(**SAMPLES[name])
    return cls("something went wrong")


@pytest.mark.parametrize("name", E.__all__)
def test_round_trip_keeps_message_and_fields(name):
    err = _sample(getattr(E, name))
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err)
    assert str(back) == str(err)
    assert back.__dict__ == err.__dict__


@pytest.mark.parametrize("cls", [c for c in map(E.__dict__.get, E.__all__) if issubclass(c, E.ObjectLostError)])
def test_object_lost_messages_name_the_object_once(cls):
    back = pickle.loads(pickle.dumps(cls(**_LOST)))
    assert str(back) == f"Object {_LOST['object_ref_hex']} was lost: {_LOST['reason']}"
    assert (back.object_ref_hex, back.reason) == (_LOST["object_ref_hex"], _LOST["reason"])
