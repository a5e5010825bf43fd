"""Ray 2.60's whole public RuntimeContext API, in a driver, a task and an actor (values and
types as Ray gives them), and ray.is_initialized() after a call started the cluster itself."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest

import raylite as ray
from raylite._core.ids import ActorID, JobID, NodeID, PlacementGroupID, TaskID


def _probe() -> dict:
    ctx = ray.get_runtime_context()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = ctx.get()
        legacy = (ctx.job_id, ctx.node_id, ctx.current_placement_group_id)
    return {
        "get": {k: type(v).__name__ for k, v in got.items()},
        "legacy": [type(v).__name__ for v in legacy],
        "warned": sum(issubclass(w.category, DeprecationWarning) for w in caught),
        "function": ctx.get_task_function_name(),
        "capture": ctx.should_capture_child_tasks_in_placement_group,
        "labels": ctx.get_node_labels(),
        "node": ctx.get_node_id(),
        "session": ctx.get_session_name(),
        "temp": ctx.get_temp_dir(),
        "accelerators": ctx.get_resource_ids(),
    }


@ray.remote
def task_probe():
    out = _probe()
    ctx = ray.get_runtime_context()
    out["task_id"] = type(ctx.task_id).__name__
    out["actor_id"] = ctx.actor_id
    out["canceled"] = ctx.is_canceled()
    return out


@ray.remote(max_restarts=1)
class Probe:
    def probe(self):
        out = _probe()
        ctx = ray.get_runtime_context()
        out["ids"] = [type(ctx.task_id).__name__, type(ctx.actor_id).__name__]
        out["reconstructed"] = ctx.was_current_actor_reconstructed
        return out

    def pid(self):
        return os.getpid()


def test_driver_context(cluster):
    out = _probe()
    assert out["get"] == {"job_id": "JobID", "node_id": "NodeID", "namespace": "str"}
    assert out["legacy"] == ["JobID", "NodeID", "PlacementGroupID"] and out["warned"] >= 4
    assert out["function"] is None and out["capture"] is False
    assert out["labels"]["ray.io/node-id"] == out["node"]
    assert out["session"] and os.path.isdir(os.path.join(out["temp"], out["session"]))
    ctx = ray.get_runtime_context()
    assert ctx.current_placement_group_id == PlacementGroupID.nil()
    with pytest.raises(RuntimeError, match="driver"):
        ctx.is_canceled()
    with pytest.raises(RuntimeError, match="inside an actor"):
        ctx.was_current_actor_reconstructed  # noqa: B018


def test_task_context(cluster):
    out = ray.get(task_probe.remote())
    assert out["get"] == {"job_id": "JobID", "node_id": "NodeID", "namespace": "str", "task_id": "TaskID"}
    assert out["function"] == f"{__name__}.task_probe"
    assert out["task_id"] == "TaskID" and out["actor_id"] is None and out["canceled"] is False
    # every accelerator kind Ray 2.60 reports, each empty here
    assert out["accelerators"] == {k: [] for k in ("GPU", "neuron_cores", "TPU", "NPU", "HPU", "RBLN", "FURIOSA",
                                                   "MBLT", "TTNPU")} and out["capture"] is False


def test_actor_context_and_reconstruction(cluster):
    actor = Probe.remote()
    out = ray.get(actor.probe.remote())
    assert out["get"] == {"job_id": "JobID", "node_id": "NodeID", "namespace": "str",
                          "task_id": "TaskID", "actor_id": "ActorID"}
    assert out["function"] == f"{__name__}.Probe.probe"
    assert out["ids"] == ["TaskID", "ActorID"] and out["reconstructed"] is False
    first = ray.get(actor.pid.remote())
    ray.kill(actor, no_restart=False)
    assert ray.get(actor.pid.remote()) != first
    assert ray.get(actor.probe.remote())["reconstructed"] is True
    ray.kill(actor)


def test_is_initialized_after_an_implicit_start(tmp_path):
    """A program whose first raylite call starts the cluster sees is_initialized() True."""
    script = tmp_path / "implicit.py"
    script.write_text(
        "import raylite as ray\n"
        "print('before', ray.is_initialized())\n"
        "@ray.remote\n"
        "def f():\n"
        "    return ray.is_initialized()\n"
        "print('task', ray.get(f.remote()))\n"
        "print('after', ray.is_initialized())\n"
        "ray.shutdown()\n"
        "print('stopped', ray.is_initialized())\n"
        "ctx = ray.get_runtime_context()\n"  # Ray's auto-init: the context call starts a cluster too
        "print('context', ray.is_initialized(), ctx.get_job_id() is not None)\n"
        "ray.shutdown()\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:5] == ["before False", "task True", "after True", "stopped False",
                                          "context True True"]


def test_ids_are_ray_id_types():
    assert issubclass(TaskID, bytes) and issubclass(ActorID, bytes)
    assert JobID(b"\x01\x00\x00\x00").hex() == "01000000" and NodeID.nil().is_nil()


@ray.remote
def _function_name_in_task():
    return ray.get_runtime_context().get_task_function_name(), ray.get_runtime_context().get_actor_name()


@ray.remote
class _NameProbe:
    def names(self):
        ctx = ray.get_runtime_context()
        return ctx.get_task_function_name(), ctx.get_actor_name()


@ray.remote
class _AsyncNameProbe:
    async def names(self):
        return ray.get_runtime_context().get_task_function_name()


def test_function_and_actor_names_are_spelled_as_ray_does(cluster):
    """Ray: `module.function` for a task and `module.Class.method` for an actor call, but an
    async actor's calls carry the class's full qualified name; an unnamed actor's name is "",
    a task's None."""
    mod = __name__
    assert ray.get(_function_name_in_task.remote()) == (f"{mod}._function_name_in_task", None)
    assert ray.get(_NameProbe.remote().names.remote()) == (f"{mod}._NameProbe.names", "")
    assert ray.get(_NameProbe.options(name="called").remote().names.remote())[1] == "called"
    assert ray.get(_AsyncNameProbe.remote().names.remote()) == f"{mod}._AsyncNameProbe.names"
    assert ray.get_runtime_context().get_actor_name() is None  # the driver
