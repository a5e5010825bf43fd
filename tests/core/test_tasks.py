"""Tasks: results, options, errors, retries, nested calls, generators, cancellation."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import raylite as ray
from raylite.exceptions import (
    GetTimeoutError,
    ObjectSerializationError,
    RayTaskError,
    TaskCancelledError,
    TaskUnschedulableError,
    WorkerCrashedError,
)
from raylite.runtime_context import _OTHER_ACCELERATORS as OTHER_ACCELERATORS


@ray.remote
def double(x):
    return x * 2


def test_remote_returns_results(cluster):
    assert ray.get(double.remote(21)) == 42
    assert ray.get([double.remote(i) for i in range(20)]) == [i * 2 for i in range(20)]


def test_options_and_multiple_returns(cluster):
    @ray.remote(num_returns=3)
    def three():
        return 1, 2, 3

    a, b, c = three.remote()
    assert ray.get([a, b, c]) == [1, 2, 3]
    r1, r2 = double.options(num_returns=2).remote((5, 6)) if False else (None, None)
    assert r1 is None and r2 is None


def test_top_level_refs_are_resolved_nested_refs_stay_refs(cluster):
    ref = ray.put(10)

    @ray.remote
    def inspect(value, nested):
        return value, isinstance(nested[0], ray.ObjectRef), ray.get(nested[0])

    assert ray.get(inspect.remote(ref, [ref])) == (10, True, 10)


def test_chained_tasks_wait_for_dependencies(cluster):
    ref = double.remote(1)
    for _ in range(5):
        ref = double.remote(ref)
    assert ray.get(ref) == 64


def test_user_exception_keeps_type_and_traceback(cluster):
    @ray.remote(max_retries=0)
    def boom():
        raise KeyError("missing-key")

    with pytest.raises(KeyError) as info:
        ray.get(boom.remote())
    assert isinstance(info.value, RayTaskError)
    assert "missing-key" in str(info.value)
    assert "in boom" in str(info.value)


def test_retry_exceptions_list(cluster, tmp_path):
    marker = tmp_path / "count"

    @ray.remote(max_retries=3, retry_exceptions=[ConnectionError])
    def flaky(path):
        n = int(open(path).read()) if os.path.exists(path) else 0
        open(path, "w").write(str(n + 1))
        if n < 2:
            raise ConnectionError("transient")
        return n

    assert ray.get(flaky.remote(str(marker))) == 2

    @ray.remote(max_retries=3, retry_exceptions=[ConnectionError])
    def wrong_kind():
        raise ValueError("not retried")

    with pytest.raises(ValueError):
        ray.get(wrong_kind.remote())


def test_worker_crash_is_retried_then_reported(cluster, tmp_path):
    marker = tmp_path / "crashed"

    @ray.remote(max_retries=1)
    def crash_once(path):
        if not os.path.exists(path):
            open(path, "w").write("x")
            os._exit(1)
        return "second attempt"

    assert ray.get(crash_once.remote(str(marker))) == "second attempt"

    @ray.remote(max_retries=0)
    def always_crash():
        os.kill(os.getpid(), 9)

    with pytest.raises(WorkerCrashedError, match="SIGKILL .*OOM killer"):
        ray.get(always_crash.remote(), timeout=30)


def test_segfaulting_worker_is_retried_then_reported(cluster, tmp_path):
    marker = tmp_path / "segfaulted"

    @ray.remote(max_retries=1)
    def segfault_once(path):
        if not os.path.exists(path):
            open(path, "w").write("x")
            import ctypes

            ctypes.string_at(0)  # SIGSEGV
        return "recovered"

    assert ray.get(segfault_once.remote(str(marker)), timeout=60) == "recovered"

    @ray.remote(max_retries=0)
    def always_segfault():
        import ctypes

        ctypes.string_at(0)

    with pytest.raises(WorkerCrashedError, match=r"died unexpectedly \(pid \d+\): killed by signal SIGSEGV "
                                                 r"\(a crash in native code"):
        ray.get(always_segfault.remote(), timeout=30)

    @ray.remote
    def still_fine():
        return "ok"

    assert ray.get(still_fine.remote(), timeout=30) == "ok"  # the node survived


def test_infeasible_request_fails_fast_naming_capacity(cluster):
    @ray.remote(num_gpus=1)
    def needs_gpu():
        return 1

    # fails with the infeasibility (not a GetTimeoutError), however slow the machine is
    with pytest.raises(TaskUnschedulableError, match="GPU: 1"):
        ray.get(needs_gpu.remote(), timeout=120)
    with pytest.raises(TaskUnschedulableError, match="CPU: 64"):
        ray.get(double.options(num_cpus=64).remote(1), timeout=120)


def test_unserializable_argument_names_the_culprit(cluster):
    class Holder:
        def __init__(self):
            self.lock = threading.Lock()

    with pytest.raises(ObjectSerializationError, match=r"double: its 1st positional argument, at \.lock, "
                                                       r"is a _thread\.lock, which cannot be pickled"):
        double.remote(Holder())
    with pytest.raises(ObjectSerializationError, match=r"its keyword argument x, at \[0\]\['k'\], is a _thread\.lock"):
        double.remote(x=[{"k": threading.Lock()}])
    with pytest.raises(ObjectSerializationError, match=r"put\(\): the part at \[1\] is a _thread\.lock"):
        ray.put([1, threading.Lock()])
    with pytest.raises(TypeError):  # also a TypeError, as in Ray
        double.remote(Holder())


def test_unserializable_return_value(cluster):
    @ray.remote(max_retries=0)
    def returns_lock():
        return threading.Lock()

    with pytest.raises(ObjectSerializationError, match="lock"):
        ray.get(returns_lock.remote())


def test_bad_calls_give_ray_errors(cluster):
    with pytest.raises(TypeError, match="cannot be called directly"):
        double(1)
    with pytest.raises(TypeError, match="bad arguments"):
        double.remote(1, 2, 3)
    with pytest.raises(TypeError, match="ObjectRef"):
        ray.get(5)
    with pytest.raises(ValueError, match="Invalid option"):
        double.options(num_cpu=1)
    with pytest.raises(ValueError, match="num_cpus"):
        ray.remote(num_cpus=-1)(lambda: 1)


def test_get_timeout(cluster):
    @ray.remote
    def slow(ev_path):
        import time

        deadline = time.time() + 20
        while not os.path.exists(ev_path) and time.time() < deadline:
            time.sleep(0.01)
        return 1

    import tempfile

    path = os.path.join(tempfile.mkdtemp(), "go")
    ref = slow.remote(path)
    with pytest.raises(GetTimeoutError):
        ray.get(ref, timeout=0.2)
    open(path, "w").close()
    assert ray.get(ref, timeout=20) == 1


def test_wait_splits_ready_and_pending(cluster, tmp_path):
    @ray.remote
    def wait_file(path):
        import time

        while not os.path.exists(path):
            time.sleep(0.01)
        return path

    gate = str(tmp_path / "gate")
    fast = [double.remote(i) for i in range(3)]
    slow = wait_file.remote(gate)
    ready, pending = ray.wait(fast + [slow], num_returns=3, timeout=10)
    assert set(ready) == set(fast) and pending == [slow]
    ready, pending = ray.wait([slow], timeout=0.1)
    assert ready == [] and pending == [slow]
    open(gate, "w").close()
    ready, _ = ray.wait([slow], timeout=10)
    assert ready == [slow]


def test_functions_and_classes_used_by_the_driver_can_be_captured_by_tasks(cluster):
    @ray.remote
    def one():
        return 1

    @ray.remote
    class Five:
        def value(self):
            return 5

    assert ray.get(one.remote()) == 1 and ray.get(Five.remote().value.remote()) == 5  # exported here

    @ray.remote
    def outer():
        return ray.get(one.remote()) + ray.get(Five.remote().value.remote())

    assert ray.get(outer.remote()) == 6


def test_nested_tasks_beyond_cpu_count_do_not_deadlock(cluster):
    @ray.remote
    def tree(depth):
        if depth == 0:
            return 1
        return sum(ray.get([tree.remote(depth - 1), tree.remote(depth - 1)]))

    assert ray.get(tree.remote(3), timeout=60) == 8


def test_tasks_queued_behind_a_blocked_task_run_elsewhere(cluster):
    """Short tasks are pipelined several to a worker. When the running task blocks in
    get(), the tasks queued behind it on that worker go back and run elsewhere (they
    may be exactly what it waits for)."""

    @ray.remote
    class Signal:
        def __init__(self):
            import asyncio

            self.event = asyncio.Event()

        async def wait(self):
            await self.event.wait()

        async def send(self):
            self.event.set()

    @ray.remote
    def inc(x):
        return x + 1

    @ray.remote
    def blocked_until(signal):
        ray.get(signal.wait.remote())
        return "released"

    signal = Signal.remote()
    assert ray.get([inc.remote(i) for i in range(300)]) == list(range(1, 301))  # pipelining on
    held = blocked_until.remote(signal)
    filler = [inc.remote(i) for i in range(2000)]  # several land behind `held` on its worker
    try:
        assert ray.get(filler, timeout=30) == list(range(1, 2001))
        assert ray.wait([held], timeout=0)[0] == []  # still blocked: nothing waited on it
    finally:
        signal.send.remote()
    assert ray.get(held, timeout=30) == "released"


def test_streaming_and_dynamic_generators(cluster):
    @ray.remote(num_returns="streaming")
    def count(n):
        for i in range(n):
            yield np.full(4, i)

    values = [ray.get(r)[0] for r in count.remote(5)]
    assert values == [0, 1, 2, 3, 4]

    @ray.remote(num_returns="dynamic")
    def dyn(n):
        yield from range(n)

    gen = ray.get(dyn.remote(3))
    assert [ray.get(r) for r in gen] == [0, 1, 2]

    @ray.remote(num_returns="streaming", max_retries=0)
    def fails_midway():
        yield 1
        raise RuntimeError("midway")

    it = fails_midway.remote()
    assert ray.get(next(it)) == 1
    with pytest.raises(RuntimeError, match="midway"):
        ray.get(next(it))


@ray.remote(num_returns="dynamic")
def _split(array, chunk_size):
    while len(array) > 0:
        yield array[:chunk_size]
        array = array[chunk_size:]


@ray.remote
def _get_size(ref_generator):
    total = 0
    for ref in ref_generator:
        chunk = ray.get(ref)
        assert len(chunk) <= 1000
        total += len(chunk)
    return total


def test_dynamic_generator_passed_to_another_task(cluster):
    """Ray's dynamic-generator example: the borrower ray.gets every inner ref (small ones live
    in the owner's memory, large ones in shared memory)."""
    array_ref = ray.put(np.zeros(25_000))
    assert ray.get(_get_size.remote(_split.remote(array_ref, 1000)), timeout=60) == 25_000
    dynamic_ref = _split.remote(array_ref, 1000)
    assert ray.get(_get_size.remote(ray.get(dynamic_ref)), timeout=60) == 25_000
    del dynamic_ref
    assert ray.get(_get_size.remote(_split.remote(np.zeros(3000), 1000)), timeout=60) == 3000

    @ray.remote
    def nested(n):  # the owner of the generator's refs is a worker, not the driver
        return ray.get(_get_size.remote(_split.remote(np.zeros(n), 1000)))

    assert ray.get(nested.remote(5000), timeout=60) == 5000


def test_async_iteration_of_streaming_generator(cluster):
    import asyncio

    @ray.remote(num_returns="streaming")
    def gen():
        yield from range(3)

    async def consume():
        return [await ref async for ref in gen.remote()]

    assert asyncio.run(consume()) == [0, 1, 2]


def test_cancel_running_task(cluster):
    @ray.remote(max_retries=0)
    def spin():
        import time

        while True:
            time.sleep(0.01)

    ref = spin.remote()
    import time

    time.sleep(0.2)  # let it start; cancel works for queued tasks too
    ray.cancel(ref)
    with pytest.raises(TaskCancelledError):
        ray.get(ref, timeout=10)
    ref2 = spin.remote()
    ray.cancel(ref2, force=True)
    with pytest.raises((TaskCancelledError, WorkerCrashedError)):
        ray.get(ref2, timeout=10)


def test_recursive_cancel_stops_child_tasks(cluster, tmp_path):
    from tests.conftest import wait_for

    marker = tmp_path / "child_cancelled"

    @ray.remote(max_retries=0)
    def child(path):
        try:
            open(path + ".started", "w").close()
            while True:
                time.sleep(0.01)
        except KeyboardInterrupt:  # how a cancelled task is told, as in Ray
            open(path, "w").close()
            raise

    @ray.remote(max_retries=0)
    def parent(path):
        return ray.get(child.remote(path))

    ref = parent.remote(str(marker))
    started = tmp_path / "child_cancelled.started"
    wait_for(started.exists, what="the child task to start")
    ray.cancel(ref, recursive=True)
    with pytest.raises(TaskCancelledError):
        ray.get(ref, timeout=10)
    wait_for(marker.exists, timeout_s=10, what="the child task to see its cancellation")


def test_force_cancel_of_an_actor_call_is_refused(cluster):
    @ray.remote
    class Slow:
        def wait(self):
            time.sleep(2)

    actor = Slow.remote()
    ref = actor.wait.remote()
    with pytest.raises(ValueError, match="raylite.kill"):
        ray.cancel(ref, force=True)


def test_object_ref_api(cluster):
    import asyncio

    ref = double.remote(4)
    assert len(ref.hex()) == 40 and hash(ref) == hash(ref)
    assert ref.future().result(timeout=10) == 8

    async def awaited():
        return await double.remote(5)

    assert asyncio.run(awaited()) == 10


def test_runtime_env_env_vars_and_working_dir(cluster, tmp_path):
    """working_dir is shipped as a package: workers run in an unpacked copy of it."""
    src = tmp_path / "project"
    (src / "pkg").mkdir(parents=True)
    (src / "helper_mod_xyz.py").write_text("VALUE = 'from working dir'\n")
    (src / "pkg" / "data.txt").write_text("nested file")
    (src / "big.ckpt").write_bytes(b"x" * 1000)

    @ray.remote
    def read_env():
        import helper_mod_xyz

        with open("pkg/data.txt") as f:
            nested = f.read()
        with open("written_by_task.txt", "w") as f:
            f.write("changes stay in the copy")
        return (os.environ.get("RAYLITE_TEST_VAR"), helper_mod_xyz.VALUE, nested, os.getcwd(),
                os.path.exists("big.ckpt"))

    env = {"env_vars": {"RAYLITE_TEST_VAR": "hello"}, "working_dir": str(src), "excludes": ["*.ckpt"]}
    var, value, nested, cwd, has_ckpt = ray.get(read_env.options(runtime_env=env).remote())
    assert (var, value, nested, has_ckpt) == ("hello", "from working dir", "nested file", False)
    assert cwd != str(src) and os.path.basename(os.path.dirname(cwd)) == "working_dir"
    assert not (src / "written_by_task.txt").exists()

    @ray.remote
    class InDir:
        def read(self):
            with open("pkg/data.txt") as f:
                return f.read()

    actor = InDir.options(runtime_env={"working_dir": str(src)}).remote()
    assert ray.get(actor.read.remote()) == "nested file"


def test_runtime_env_py_modules_are_shipped(cluster, tmp_path):
    pkg = tmp_path / "libs" / "shipped_pkg_xyz"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .core import answer\n")
    (pkg / "core.py").write_text("def answer():\n    return 42\n")
    single = tmp_path / "single_mod_xyz.py"
    single.write_text("NAME = 'single file'\n")

    @ray.remote
    def use_modules():
        import shipped_pkg_xyz
        import single_mod_xyz

        return shipped_pkg_xyz.answer(), single_mod_xyz.NAME, shipped_pkg_xyz.__file__

    env = {"py_modules": [str(pkg), str(single)]}
    answer, name, where = ray.get(use_modules.options(runtime_env=env).remote())
    assert (answer, name) == (42, "single file")
    assert not where.startswith(str(tmp_path))  # imported from the shipped copy
    with pytest.raises(ValueError, match="does not exist"):
        use_modules.options(runtime_env={"py_modules": [str(tmp_path / "nope")]}).remote()


def test_runtime_env_bad_working_dir_is_a_clear_error(cluster, tmp_path):
    @ray.remote
    def f():
        return 1

    with pytest.raises(ValueError, match="not a local directory"):
        f.options(runtime_env={"working_dir": str(tmp_path / "missing")}).remote()
    assert ray.get(f.options(runtime_env={"pip": ["numpy>=1.0", "msgpack"]}).remote()) == 1  # installed
    with pytest.raises(ValueError, match=r"pip/uv must be a list"):
        f.options(runtime_env={"pip": [1, 2]}).remote()
    missing = {"packages": ["surely-not-a-real-package-xyz==1.0"], "pip_install_options": ["--no-index"]}
    with pytest.raises(ray.exceptions.RuntimeEnvSetupError, match=r"surely-not-a-real-package-xyz"):
        ray.get(f.options(runtime_env={"pip": missing}).remote())  # the node tried to install it
    with pytest.raises(ValueError, match="conda.*not supported"):
        f.options(runtime_env={"conda": {"dependencies": ["numpy"]}}).remote()
    with pytest.raises(ValueError, match="unknown runtime_env field"):
        f.options(runtime_env={"env_var": {"A": "1"}}).remote()


def test_runtime_env_pip_installs_the_package_for_the_task(cluster, tmp_path):
    from tests.jobs.test_job_envs_and_limits import build_wheel

    wheel = build_wheel(tmp_path, name="raylite_taskpkg", value=7)

    @ray.remote
    def use_it():
        import raylite_taskpkg

        return raylite_taskpkg.VALUE

    env = {"pip": {"packages": [wheel], "pip_install_options": ["--no-index"]}}
    assert ray.get(use_it.options(runtime_env=env).remote(), timeout=240) == 7
    with pytest.raises(ray.exceptions.RayTaskError, match="No module named 'raylite_taskpkg'"):
        ray.get(use_it.remote())  # workers without that environment do not see it


def test_runtime_context_in_task(cluster):
    @ray.remote(num_cpus=1)
    def ctx():
        c = ray.get_runtime_context()
        return c.get_task_id(), c.get_node_id(), c.get_assigned_resources(), c.get_job_id()

    task_id, node_id, res, job_id = ray.get(ctx.remote())
    assert task_id and node_id == ray.get_runtime_context().get_node_id()
    assert res == {"CPU": 1}
    assert job_id == ray.get_runtime_context().get_job_id()


def test_worker_output_reaches_driver(tmp_path):
    # A separate driver process: reading pytest's capture while the I/O thread writes can drop lines.
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "talk.py"
    script.write_text(textwrap.dedent("""
        import os
        import raylite as ray
        ray.init(num_cpus=1)
        @ray.remote
        def talk():
            print("line from the worker", flush=True)
            return os.getpid()
        print(f"PID {ray.get(talk.remote())}", flush=True)
        ray.shutdown()
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    # The worker's line is printed by the driver's I/O thread and may land inside the driver's
    # own print (print writes the text and the newline separately), so find the pid by pattern.
    import re

    pid = re.search(r"PID (\d+)", out.stdout).group(1)
    assert f"(talk pid={pid}, ip=" in out.stdout and "line from the worker" in out.stdout


def test_gpu_requests_get_their_own_devices(tmp_path):
    """With (logical) GPUs on the node, each GPU task or actor sees only its devices."""
    script = tmp_path / "gpus.py"
    script.write_text(
        "import os, raylite as ray\n"
        "ray.init(num_cpus=4, num_gpus=2)\n"
        "@ray.remote(num_gpus=1)\n"
        "def one():\n"
        "    import time; time.sleep(0.3)\n"
        "    return ray.get_gpu_ids(), os.environ['CUDA_VISIBLE_DEVICES']\n"
        "@ray.remote(num_gpus=0.5)\n"
        "def half():\n"
        "    return ray.get_gpu_ids()\n"
        "@ray.remote(num_gpus=2)\n"
        "class Both:\n"
        "    def ids(self):\n"
        "        return ray.get_gpu_ids(), ray.get_runtime_context().get_accelerator_ids()\n"
        "@ray.remote\n"
        "def none():\n"
        "    return ray.get_gpu_ids()\n"
        "a, b = ray.get([one.remote(), one.remote()])\n"
        "print(sorted([a[0], b[0]]), sorted([a[1], b[1]]))\n"
        "print(ray.get(none.remote()))\n"
        "print(len(set(map(tuple, ray.get([half.remote() for _ in range(4)])))) <= 2)\n"
        "both = Both.remote()\n"
        "print(ray.get(both.ids.remote()))\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[[0], [1]] ['0', '1']", "[]", "True", "([0, 1], {'GPU': ['0', '1'], " + ", ".join(f"'{k}': []" for k in OTHER_ACCELERATORS) + "})"]


def test_gpu_ids_are_the_uuids_the_driver_was_given(tmp_path):
    """A driver started with CUDA_VISIBLE_DEVICES naming devices by UUID: tasks get those names
    (as Ray hands them out), not indexes that would point a library at another device."""
    script = tmp_path / "uuids.py"
    script.write_text(
        "import os, raylite as ray\n"
        "ray.init(num_cpus=2, num_gpus=1)\n"
        "@ray.remote(num_gpus=1)\n"
        "def one():\n"
        "    return ray.get_gpu_ids(), os.environ['CUDA_VISIBLE_DEVICES']\n"
        "print(ray.get(one.remote()))\n")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "GPU-7f1e,GPU-03aa"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["(['GPU-7f1e'], 'GPU-7f1e')"]


def test_neuron_cores_are_handed_out_as_devices_like_gpus(tmp_path):
    """Neuron cores (and TPU chips, ...) are devices, as GPUs are: each task or actor holds its
    own, sees them in NEURON_RT_VISIBLE_CORES and get_accelerator_ids(), also through a
    placement group's bundle; a GPU actor in a group without a bundle index gets its device."""
    script = tmp_path / "neuron.py"
    script.write_text(
        "import os, raylite as ray\n"
        "from raylite.util.placement_group import placement_group\n"
        "from raylite.util.scheduling_strategies import PlacementGroupSchedulingStrategy\n"
        "ray.init(num_cpus=4, num_gpus=1, resources={'neuron_cores': 3})\n"
        "print(ray.cluster_resources().get('accelerator_type:aws-neuron-core'))\n"
        "@ray.remote(resources={'neuron_cores': 1})\n"
        "def one():\n"
        "    import time; time.sleep(0.3)\n"
        "    return ray.get_runtime_context().get_accelerator_ids()['neuron_cores'], os.environ['NEURON_RT_VISIBLE_CORES']\n"
        "@ray.remote\n"
        "def none():\n"
        "    return ray.get_runtime_context().get_accelerator_ids()['neuron_cores'], os.environ.get('NEURON_RT_VISIBLE_CORES')\n"
        "print(sorted(ray.get([one.remote() for _ in range(3)])))\n"
        "print(ray.get(none.remote()))\n"
        "@ray.remote(num_gpus=1, resources={'neuron_cores': 2})\n"
        "class Both:\n"
        "    def ids(self):\n"
        "        ids = ray.get_runtime_context().get_accelerator_ids()\n"
        "        return ids['GPU'], ids['neuron_cores'], os.environ['NEURON_RT_VISIBLE_CORES']\n"
        "pg = placement_group([{'CPU': 1, 'GPU': 1, 'neuron_cores': 2}])\n"
        "ray.get(pg.ready(), timeout=60)\n"
        "both = Both.options(scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=pg)).remote()\n"
        "print(ray.get(both.ids.remote(), timeout=60))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("NEURON_RT_VISIBLE_CORES", "CUDA_VISIBLE_DEVICES")}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["1.0", "[(['0'], '0'), (['1'], '1'), (['2'], '2')]", "([], None)",
                                       "(['0'], ['0', '1'], '0,1')"]


def test_lineage_is_kept_while_results_live_and_dropped_with_them(cluster):
    """The owner keeps how to rebuild each result in a node's store (lineage), and only while
    it is referenced. Values returned inline live in the owner and cannot be lost: no record."""
    from raylite._core import runtime
    from tests.conftest import wait_for

    @ray.remote(max_retries=1)
    def make(i):
        return np.full(20_000, i)  # 160 KB: kept in the node's store, not inline

    @ray.remote(max_retries=1)
    def plus(a):
        return a + 1

    # Measure only the lineage of this test's own objects: earlier tests' entries may still be
    # dropped in the background while this one runs, so a global count is not attributable.
    client = runtime.client()
    firsts = [make.remote(i) for i in range(20)]
    seconds = [plus.remote(f) for f in firsts]
    assert [int(ray.get(s)[0]) for s in seconds] == [i + 1 for i in range(20)]
    first_ids = [f.binary() for f in firsts]
    second_ids = [s.binary() for s in seconds]
    assert all(client.refs.lineage_of(i) is not None for i in first_ids + second_ids)
    del firsts  # their values go, their lineage stays for `seconds`
    wait_for(lambda: not any(i in client.entries for i in first_ids), what="the first values freed")
    assert all(client.refs.lineage_of(i) is not None for i in first_ids)
    del seconds
    wait_for(lambda: all(client.refs.lineage_of(i) is None for i in first_ids + second_ids),
             what="lineage dropped with the results")

    @ray.remote(max_retries=1)
    def small(i):
        return i

    results = [small.remote(i) for i in range(20)]
    assert ray.get(results) == list(range(20))
    # inline results: nothing to rebuild, nothing kept
    assert all(client.refs.lineage_of(r.binary()) is None for r in results)


def test_rays_underscore_remote_spelling_takes_options_by_keyword(cluster):
    """Libraries call `f._remote(args=[...], kwargs={...}, num_returns=2)` and
    `Cls._remote(args=[...], num_cpus=0)`, Ray's semi-public submission path."""

    @ray.remote
    def first_n(n, offset=0):
        return [offset + i for i in range(n)]

    @ray.remote
    class Holder:
        def __init__(self, value):
            self.value = value

        def get(self):
            return self.value

    assert first_n._remote([0], num_returns=0) is None
    a, b = first_n._remote(args=[2], kwargs={"offset": 10}, num_returns=2)
    assert ray.get([a, b]) == [10, 11]
    assert ray.get(Holder._remote(args=["kept"], num_cpus=0).get.remote()) == "kept"


def test_a_cancelled_task_is_interrupted_and_may_return_a_value_of_its_own(cluster, tmp_path):
    """As in Ray: cancel() raises KeyboardInterrupt in the task (not an Exception, so a bare
    `except Exception` in user code does not swallow it); is_canceled() is True there, and a
    task that handles it and returns gives its caller that value."""
    from tests.conftest import wait_for

    started = tmp_path / "started"

    @ray.remote(max_retries=0)
    def cleans_up(path):
        try:
            open(path, "w").close()
            while True:
                try:
                    time.sleep(0.01)
                except Exception:  # noqa: BLE001  user code that catches everything it can
                    pass
        except KeyboardInterrupt:
            return "cleaned up" if ray.get_runtime_context().is_canceled() else "not told"

    ref = cleans_up.remote(str(started))
    wait_for(started.exists, what="the task to start")
    ray.cancel(ref)
    assert ray.get(ref, timeout=30) == "cleaned up"


def test_a_task_cancelled_while_blocked_on_an_actor_call_fails_as_a_cancelled_task_error(cluster, tmp_path):
    """As in Ray: a running task that the cancellation interrupts ends with a RayTaskError that
    is also a TaskCancelledError, and it counts as FINISHED (it ran; it is not retried); the
    actor call it waited on is cancelled too (recursive) but a sync actor is not interrupted:
    that call keeps RUNNING. A child's cancellation raised by get() in a task that was not itself
    cancelled is that task's ordinary error."""
    from raylite.exceptions import RayTaskError
    from raylite.util.state import list_tasks
    from tests.conftest import wait_for

    @ray.remote(num_cpus=0)
    class Gate:
        def hold(self, path):
            open(path, "w").close()
            time.sleep(30)

    @ray.remote(max_retries=2)
    def waits_on(gate, path):
        return ray.get(gate.hold.remote(path))

    gate = Gate.remote()
    started = tmp_path / "held"
    ref = waits_on.options(name="waits_on").remote(gate, str(started))
    wait_for(started.exists, what="the actor call to start")
    ray.cancel(ref)
    with pytest.raises(RayTaskError, match="TaskCancelledError") as info:
        ray.get(ref, timeout=30)
    assert isinstance(info.value, TaskCancelledError)

    def states() -> tuple:
        def state_of(name: str):
            rows = list_tasks(filters=[("name", "=", name)])
            return rows[0]["state"] if rows else None

        return state_of("waits_on"), state_of("Gate.hold")

    wait_for(lambda: states() == ("FINISHED", "RUNNING"), timeout_s=20,
             what=f"the task FINISHED and the actor call still RUNNING (saw {states()})")

    @ray.remote(max_retries=0)
    def slow_child():
        time.sleep(30)

    @ray.remote(max_retries=0)
    def parent_of(child_ref_list):
        return ray.get(child_ref_list[0])

    child = slow_child.remote()
    parent = parent_of.remote([child])
    ray.cancel(child)
    with pytest.raises(RayTaskError, match="TaskCancelledError"):
        ray.get(parent, timeout=30)
