"""The worker process: runs tasks and actor calls pushed to it by their owners.

The I/O thread (the CoreClient's loop) receives PushTask and CreateActor and
queues them; the main thread executes them, in order for plain workers and
sync actors, on a thread pool for threaded actors, and on an asyncio loop in
the main thread for async actors. Output on fds 1 and 2 is forwarded, line by
line, to the driver with a "(name pid=..., ip=...)" prefix.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import ctypes
import importlib
import inspect
import os
import queue
import signal
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import cloudpickle

from raylite import exceptions as E
from raylite._core import protocol as P
from raylite._core import resources as R
from raylite._core import serialization as ser
from raylite._core.accelerators import OTHER_DEVICE_ENV
from raylite._core.client.core_client import CoreClient
from raylite._core.client.records import ObjectEntry
from raylite._core.client.refs import ObjectRef
from raylite._core.config import get_config
from raylite._core.ids import ObjectID, set_job
from raylite._core.runtime_env import packaging, pip_env
from raylite._core.task_spec import (
    DYNAMIC,
    KIND_ACTOR_CALL,
    KIND_ACTOR_CREATE,
    KIND_TASK,
    STREAMING,
    ArgPlaceholder,
    PackedArgs,
    TaskSpec,
)
from raylite._core.worker import actor_groups, proctitle
from raylite._core.worker.cgraph_runner import GraphHost
from raylite._core.worker.output import OutputForwarder

# the task or actor call running in this thread or asyncio task: a threaded or async actor runs
# several calls at once, and each one's get_task_id() and children are its own
_RUNNING_TASK: contextvars.ContextVar[bytes] = contextvars.ContextVar("raylite_running_task", default=b"")


# what a cancel sends the main thread to interrupt a plain task blocked in a system call
CANCEL_SIGNAL = signal.SIGUSR2


class WorkerContext:
    """What `get_runtime_context()` reads inside a worker."""

    def __init__(self) -> None:
        self.task_id = b""
        self.task_name = ""
        self.actor_id = b""
        self.actor_name = ""
        self.namespace = ""
        self.job_id = b""
        self.assigned_resources: dict = {}
        self.gpu_ids: list = []
        self.device_ids: dict[str, list] = {}  # neuron_cores, TPU, ...: the devices held, as gpu_ids
        self.current_spec: TaskSpec | None = None
        self.task_threads: dict[bytes, int] = {}


class Worker:
    def __init__(self, request: dict) -> None:
        self.request = request
        self.config = get_config()
        self.client = CoreClient(
            self.config, worker_id=bytes.fromhex(request["worker_id"]), kind="worker", job_id=b"",
            node_address=request["node_address"], token=request["token"],
            session_dir=request["session_dir"])
        self.client.extra_handlers = {
            P.PushTask: self._on_push_task,
            P.CreateActor: self._on_create_actor,
            P.CancelTask: self._on_cancel_task,
            P.GetRunningTask: self._on_get_running_task,
        }
        self.ctx = WorkerContext()
        self.tasks: queue.SimpleQueue = queue.SimpleQueue()
        self.actor: Any = None
        self.actor_spec: TaskSpec | None = None
        self.actor_loop: asyncio.AbstractEventLoop | None = None
        self.actor_pool: ThreadPoolExecutor | None = None
        self.actor_sema: asyncio.Semaphore | None = None
        self.groups: actor_groups.ConcurrencyGroups | None = None  # the actor's executors
        self.cancelled: set[bytes] = set()
        # an async actor's calls in progress or waiting for a slot: task id -> (loop, asyncio task)
        self.async_calls: dict[bytes, tuple[asyncio.AbstractEventLoop, asyncio.Task]] = {}
        self.log_prefix = ""
        # while the running task is blocked in get(), queued tasks go back to their owners
        # (they might be what it waits for); guarded so no push slips in unseen
        self.blocked_in_get = False
        self.queue_lock = threading.Lock()
        self.setup_error: Exception | None = None  # runtime_env could not be set up here
        self._hooks_run: set[str] = set()  # worker_process_setup_hooks already run here
        self.cgraph: GraphHost | None = None  # this actor's part in a compiled graph
        self._initial_visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        self._initial_device_env = {var: os.environ.get(var) for var in OTHER_DEVICE_ENV.values()}
        # set by the user's environment or the runtime_env's env_vars: then tasks leave it alone
        self._initial_omp = os.environ.get("OMP_NUM_THREADS")
        self._output: OutputForwarder | None = None  # fds 1 and 2 -> log files and drivers
        self._exec_facts: dict | None = None  # node, worker, pid: the same for every task event here
        self._last_error = threading.local()  # text of the last task error, per thread
        # the plain task the main thread runs now, while a cancel may interrupt it (_execute)
        self._interruptible: bytes | None = None
        self._main_ident = threading.main_thread().ident  # where run() executes plain tasks
        # exit_actor() was called: calls not yet started never start (the process ends within
        # moments, and their callers get the actor's death, as in Ray)
        self.exiting = False
        # max_calls: how many times each function (by export key) ran here. Once one reaches
        # its limit the worker retires: it takes no more tasks and exits when nothing it owns
        # is referenced any longer (the refs its tasks handed out stay readable until then)
        self._calls: dict[bytes, int] = {}
        self.retiring = False

    # ------------------------------------------------------------ I/O thread side
    def _on_push_task(self, conn, msg: P.PushTask, rid: int):
        spec = TaskSpec.from_wire(msg.spec)
        if self.groups is not None and spec.kind == KIND_ACTOR_CALL:
            self._dispatch_actor_call(conn, rid, spec)
        else:
            with self.queue_lock:
                if (self.blocked_in_get or self.retiring) and spec.kind == KIND_TASK and self.actor_spec is None:
                    conn.send(P.PushTaskReply(spec.task_id, [], [], "bounced"), -rid)
                    return None
                self.tasks.put((conn, rid, spec))
        return None

    def _dispatch_actor_call(self, conn, rid: int, spec: TaskSpec) -> None:
        """Run an actor call on its concurrency group's executor (actor_groups.py)."""
        groups = self.groups
        group = spec.concurrency_group or actor_groups.method_group(self.actor, spec.method_name)
        try:
            if groups.is_async:
                g = groups.async_group(group)
                asyncio.run_coroutine_threadsafe(self._run_async_call(conn, rid, spec, g.sema), g.loop)
                return
            pool = groups.pool(group)
        except ValueError as e:  # a group the actor does not declare
            self._reply(conn, rid, self._error_reply(spec, self._task_error(spec, e), "app"))
            return
        if pool is not None:
            pool.submit(self._execute_and_reply, conn, rid, spec)
            return
        with self.queue_lock:
            self.tasks.put((conn, rid, spec))

    def _on_create_actor(self, conn, msg: P.CreateActor, rid: int):
        spec = TaskSpec.from_wire(msg.spec)
        if msg.gpu_ids or msg.device_ids:  # the node picked the actor's devices; they hold for its lifetime
            spec = spec.replace(gpu_ids=list(msg.gpu_ids), device_ids=dict(msg.device_ids))
        self.tasks.put((conn, rid, spec))
        return None

    def _on_get_running_task(self, conn, msg: P.GetRunningTask, rid: int):
        """The node's memory monitor picks a worker to kill: retriable tasks go first."""
        spec = self.ctx.current_spec
        if spec is None:
            return P.GetRunningTaskReply("", True)
        retries = spec.max_task_retries if spec.kind == KIND_ACTOR_CALL else spec.max_retries
        return P.GetRunningTaskReply(spec.display_name(), retries != 0)

    def _on_cancel_task(self, conn, msg: P.CancelTask, rid: int):
        if msg.task_id in self.client._tasks:  # one this process owns (submitted by a task here)
            self.client._cancel(msg.task_id, msg.force, msg.recursive)
            return None
        self.cancelled.add(msg.task_id)
        if msg.recursive:  # the tasks it submitted are cancelled too (and theirs, in turn)
            children = [tid for tid, rec in list(self.client._tasks.items())
                        if rec.spec.parent_task_id == msg.task_id]
            for child in children:
                self.client._cancel(child, msg.force, True)
        call = self.async_calls.get(msg.task_id)
        if call is not None:  # an async actor's call: asyncio's cancellation, as in Ray
            loop, task = call
            loop.call_soon_threadsafe(task.cancel)
            return None
        tid = self.ctx.task_threads.get(msg.task_id)
        if tid is not None and self.actor_spec is not None:
            # a running call of a sync or threaded actor is not interrupted (the actor's state
            # would be left half-changed); it sees is_canceled(), and its caller gets
            # TaskCancelledError when it returns (_execute), as in Ray
            return None
        if tid is not None:
            # KeyboardInterrupt, as Ray raises: a task may catch it to clean up (is_canceled() is
            # True there) and even return a value, which the caller then gets; a plain
            # `except Exception` in user code does not swallow the cancellation. Uncaught, it
            # becomes the caller's TaskCancelledError (_execute).
            if tid == self._main_ident and self._interruptible == msg.task_id:
                # a signal, so a blocking call (time.sleep, a socket read) returns at once too;
                # _on_cancel_signal raises it in the main thread
                signal.pthread_kill(tid, CANCEL_SIGNAL)
            else:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), ctypes.py_object(KeyboardInterrupt))
        return None

    def _on_cancel_signal(self, signum: int, frame: Any) -> None:
        """Main thread: a cancelled plain task still running its own code is interrupted."""
        task_id = self._interruptible
        if task_id is not None and task_id in self.cancelled:
            self._interruptible = None  # once: its cleanup code is not interrupted again
            raise KeyboardInterrupt

    def running_task_id(self) -> bytes:
        """The id of the task or call this code runs in (in a thread it started itself: the
        last one this worker began)."""
        return _RUNNING_TASK.get() or self.ctx.task_id

    def cancelled_here(self) -> bool:
        """Whether the task or call running on this thread was cancelled (is_canceled()): a
        threaded actor runs several calls at once, one per thread."""
        me = threading.get_ident()
        return any(thread == me and task_id in self.cancelled
                   for task_id, thread in list(self.ctx.task_threads.items()))

    def _reply(self, conn, rid: int, msg: P.Message) -> None:
        with contextlib.suppress(Exception):  # forwarding output is best effort; the reply is not
            self._drain_output()
        self.client.call_soon(_send_reply, conn, msg, -rid)

    def _drain_output(self) -> None:
        if self._output is not None:
            self._output.drain()

    # ------------------------------------------------------------ main thread
    def run(self) -> None:
        signal.signal(CANCEL_SIGNAL, self._on_cancel_signal)
        self.client.start()
        from raylite._core import runtime

        runtime.set_worker(self.client, self)
        self.client.blocked_hook = self._blocked
        self._enter_working_dir()
        self._redirect_output()
        while True:
            conn, rid, spec = self.tasks.get()
            if spec.kind == KIND_ACTOR_CREATE:
                self._create_actor(conn, rid, spec)
            else:
                self._execute_and_reply(conn, rid, spec)

    def _enter_working_dir(self) -> None:
        """Unpack the job's shipped working_dir and py_modules on this node (once each) and
        run inside the working_dir, with every package importable."""
        what = "working_dir"
        try:
            if self.request.get("pip"):
                tool, spec = self.request["pip"]
                what = f"{tool} {spec!r}"
                venv = pip_env.ensure(os.path.dirname(self.request["session_dir"]), tool, spec)
                if venv is not None:
                    pip_env.activate_in_process(venv)
            for digest in self.request.get("py_module_pkgs") or []:
                what = f"py_modules (package {digest})"
                sys.path.insert(0, self._unpacked(digest))
            digest = self.request.get("working_dir_pkg")
            if digest:
                what = f"working_dir (package {digest})"
                path = self._unpacked(digest)
                os.chdir(path)
                sys.path.insert(0, path)
        except Exception as e:  # noqa: BLE001
            self.setup_error = E.RuntimeEnvSetupError(
                f"could not set up runtime_env {what} on node {self.client.node_ip}: "
                f"{type(e).__name__}: {e}")

    def _run_setup_hook(self, spec: TaskSpec) -> None:
        """runtime_env worker_process_setup_hook: run once in this worker, before the first task
        (or actor) that carries it. A hook that fails fails that task with RuntimeEnvSetupError."""
        hook = (spec.runtime_env or {}).get("worker_process_setup_hook")
        if not hook or hook in self._hooks_run:
            return
        try:
            if hook.startswith(packaging.HOOK_SCHEME):
                key = ("hook-" + hook[len(packaging.HOOK_SCHEME):]).encode()
                reply = self.client.head_request(P.KvGet(packaging.KV_NAMESPACE, key), timeout=60)
                if reply.value is None:
                    raise FileNotFoundError(f"setup hook {hook} is not in the cluster's store")
                fn = cloudpickle.loads(reply.value)
            else:
                module, _, name = hook.rpartition(".")
                fn = getattr(importlib.import_module(module), name)
            fn()
        except Exception as e:  # noqa: BLE001
            raise E.RuntimeEnvSetupError(f"runtime_env worker_process_setup_hook {hook} failed on node "
                                         f"{self.client.node_ip}: {type(e).__name__}: {e}") from e
        self._hooks_run.add(hook)

    def _unpacked(self, digest: str) -> str:
        path = packaging.unpacked_path(self.request["session_dir"], digest)
        if os.path.isdir(path):
            return path
        reply = self.client.head_request(P.KvGet(packaging.KV_NAMESPACE, digest.encode()), timeout=120)
        if reply.value is None:
            raise FileNotFoundError(f"package {digest} is not in the cluster's store (was the driver "
                                    "that uploaded it connected to another cluster?)")
        return packaging.unpack(reply.value, self.request["session_dir"], digest)

    def _blocked(self, blocked: bool) -> None:
        if threading.current_thread() is threading.main_thread() or self.actor_pool is not None:
            self.client.call_soon(self.client._send_node, P.WorkerBlocked(blocked))
        if self.actor_spec is None and threading.current_thread() is threading.main_thread():
            self._bounce_queued(blocked)

    def _bounce_queued(self, blocked: bool) -> None:
        """A task blocked in get() may wait on tasks queued behind it here: hand them back."""
        with self.queue_lock:
            self.blocked_in_get = blocked
            if not blocked:
                return
            keep = []
            while True:
                try:
                    item = self.tasks.get_nowait()
                except queue.Empty:
                    break
                conn, rid, spec = item
                if spec.kind == KIND_TASK:
                    self._reply(conn, rid, P.PushTaskReply(spec.task_id, [], [], "bounced"))
                else:
                    keep.append(item)  # actor creation and calls keep their order
            for item in keep:
                self.tasks.put(item)

    def _execute_and_reply(self, conn, rid: int, spec: TaskSpec) -> None:
        if self.exiting:
            return
        if self.retiring and spec.kind == KIND_TASK:
            self._reply(conn, rid, P.PushTaskReply(spec.task_id, [], [], "bounced"))  # runs elsewhere
            return
        reply = self.execute(conn, spec)
        if spec.max_calls and spec.kind == KIND_TASK:
            key = spec.function.function_id
            self._calls[key] = self._calls.get(key, 0) + 1
            if self._calls[key] >= spec.max_calls:
                with self.queue_lock:
                    self.retiring = True
                # its owner gives the lease back for good
                reply = P.PushTaskReply(reply.task_id, reply.returns, reply.borrowed, reply.error_kind, True)
                self._reply(conn, rid, reply)
                self._retire()
                return
        self._reply(conn, rid, reply)

    def _retire(self) -> None:
        """Main thread, after a function's max_calls-th run: hand queued tasks back to their
        owners, wait until no object this process owns is referenced anywhere (a caller may
        still read what its tasks returned, as the refs they created are served from here),
        then end the process the way a finished worker does."""
        while True:
            try:
                conn, rid, spec = self.tasks.get_nowait()
            except queue.Empty:
                break
            self._reply(conn, rid, P.PushTaskReply(spec.task_id, [], [], "bounced"))
        # the replies go out before anything else: the loop runs its callbacks in order
        with contextlib.suppress(Exception):
            self.client.run_sync(asyncio.sleep(0), timeout=5)
        while self.client.owns_referenced_objects():
            time.sleep(0.05)
        self.exit_gracefully()

    def _resolve_args(self, spec: TaskSpec, held: list | None = None) -> tuple[tuple, dict]:
        """The call's arguments, their refs fetched. `held` (kept by the caller while the call
        runs) receives the fetched refs: while they live, this process remembers their values,
        so a `ray.get` of the same ref passed again inside another argument finds it at once,
        without asking the owner and lending the task's CPU meanwhile (as Ray finds it local)."""
        payload = spec.args
        if payload[0] == "ref":
            packed: PackedArgs = self.client.get([ObjectRef(payload[1], payload[2], _borrowed=True)])[0]
            args, kwargs = ser.deserialize(packed.meta, packed.buffers)
        else:
            args, kwargs = ser.deserialize(payload[1], payload[2])
        if not spec.arg_refs:
            return args, kwargs
        values: list = [None] * len(spec.arg_refs)
        to_fetch = []
        for r in spec.arg_refs:
            if len(r) == 5 and held is None:  # value shipped with the task
                values[r[0]] = self.client._materialize(ObjectRef(r[1], r[2], _borrowed=False), ObjectEntry(r[3], r[4]))
            elif len(r) == 5:  # shipped, and remembered while the call runs (see `held`)
                ref = ObjectRef(r[1], r[2], _borrowed=False)  # as above: the owner counts the task's args
                values[r[0]] = self.client._materialize(ref, self.client.adopt_entry(r[1], ObjectEntry(r[3], r[4])))
                held.append(ref)
            else:
                to_fetch.append(r)
        if to_fetch:
            refs = [ObjectRef(r[1], r[2], _borrowed=True) for r in to_fetch]
            for r, v in zip(to_fetch, self.client.get(refs)):
                values[r[0]] = v
            if held is not None:
                held.extend(refs)
        args = tuple(values[a.index] if isinstance(a, ArgPlaceholder) else a for a in args)
        kwargs = {k: values[v.index] if isinstance(v, ArgPlaceholder) else v for k, v in kwargs.items()}
        return args, kwargs

    def _record(self, spec: TaskSpec, state: str, extra: Any = None) -> None:
        events = self.client.task_events
        if events is None:
            return
        if state == "RUNNING":
            facts = self._exec_facts
            if facts is None:
                facts = self._exec_facts = {"node_id": self.client.node_id, "worker_id": self.client.worker_id,
                                            "worker_pid": os.getpid()}
            # described here too, not only by the owner: an owner killed before its next flush
            # takes its own events with it (described once per function and batch, see drain)
            extra = (spec, facts)
        events.record(spec.task_id, spec.attempt, spec.job_id, state, time.time(), extra)

    def _record_end(self, spec: TaskSpec, reply: Any) -> None:
        if threading.get_ident() != self._main_ident or self.tasks.empty():
            # the main thread goes straight on to its next queued task, whose own title
            # replaces this one (often the same: no syscall at all); only an idle worker says so
            self._idle_title()
        kind = getattr(reply, "error_kind", "")
        if kind == "interrupted" or (not kind and getattr(reply, "ok", True)):
            self._record(spec, "FINISHED")
            return
        error = getattr(self._last_error, "text", "") or kind
        self._record(spec, "FAILED", {"error_type": "TASK_CANCELLED" if kind == "cancelled" else
                                      "TASK_EXECUTION_EXCEPTION", "error_message": error,
                                      "traceback": getattr(self._last_error, "traceback", "")})

    def _idle_title(self) -> None:
        spec = self.actor_spec
        proctitle.set_title(f"ray::{spec.function.qualname.rsplit('.', 1)[-1]}" if spec is not None
                            else proctitle.IDLE)

    def _enter(self, spec: TaskSpec) -> None:
        self._record(spec, "RUNNING")
        _RUNNING_TASK.set(spec.task_id)
        self.ctx.task_id = spec.task_id
        self.ctx.task_name = spec.display_name()
        proctitle.set_title(f"ray::{self.ctx.task_name}")
        self.ctx.current_spec = spec
        self.ctx.job_id = spec.job_id
        self.client.job_id = spec.job_id
        set_job(spec.job_id)  # the ids this task makes carry its job
        self.client.namespace = spec.namespace or self.client.namespace
        if spec.kind != KIND_ACTOR_CALL:
            self.ctx.assigned_resources = spec.resources
            self._set_visible_gpus(spec.gpu_ids)
            self._set_visible_devices(spec.device_ids)
            self._set_omp_threads(spec.resources.get("CPU", 0))
        if not self.actor_spec:
            self.log_prefix = f"({spec.display_name()} pid={os.getpid()}, ip={self.client.node_ip}) "

    def _set_omp_threads(self, cpus_fixed: int) -> None:
        """Ray's OMP_NUM_THREADS: the task's or actor's whole CPUs (at least 1), so numerical
        libraries do not start a thread per core of the machine in every worker; set per task,
        unless the user's environment or env_vars set it."""
        if self._initial_omp is None:
            os.environ["OMP_NUM_THREADS"] = str(max(1, cpus_fixed // R.SCALE))

    def _set_visible_gpus(self, gpu_ids: list) -> None:
        """A task or actor sees only the GPU devices its lease holds (as in Ray); a task
        that asked for none sees what the worker started with."""
        self.ctx.gpu_ids = list(gpu_ids)
        if gpu_ids:
            os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in gpu_ids)
        elif self.config.accel_env_var_override_on_zero:
            os.environ["CUDA_VISIBLE_DEVICES"] = ""  # Ray's opt-in: no GPU asked for, none visible
        elif self._initial_visible is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = self._initial_visible

    def _set_visible_devices(self, device_ids: dict) -> None:
        """The other accelerators (neuron cores, TPU chips, ...) as GPUs: a task or actor sees only
        the devices it holds; one that holds none of a kind sees what the worker started with."""
        if not device_ids and not self.ctx.device_ids:
            return  # the usual case: nothing held now or by the last task, nothing to undo
        self.ctx.device_ids = {kind: list(ids) for kind, ids in device_ids.items()}
        for kind, var in OTHER_DEVICE_ENV.items():
            ids = device_ids.get(kind)
            initial = self._initial_device_env[var]
            if ids:
                os.environ[var] = ",".join(str(i) for i in ids)
            elif initial is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = initial

    def execute(self, conn, spec: TaskSpec) -> P.PushTaskReply:
        """Run one task or actor call; never raises."""
        reply = self._execute(conn, spec)
        self._record_end(spec, reply)
        return reply

    def _execute(self, conn, spec: TaskSpec) -> P.PushTaskReply:
        self._enter(spec)
        tid = threading.get_ident()
        self.ctx.task_threads[spec.task_id] = tid
        try:
            if spec.task_id in self.cancelled:
                raise E.TaskCancelledError(spec.task_id.hex())
            if self.setup_error is not None:
                return self._error_reply(spec, self.setup_error, "app")
            self._run_setup_hook(spec)
            fn = self._callable(spec)
            held: list = []  # the argument refs, alive until the call returns
            if spec.kind == KIND_TASK and tid == self._main_ident:
                self._interruptible = spec.task_id
            args, kwargs = self._resolve_args(spec, held)
            result = fn(*args, **kwargs)
            self._interruptible = None
            if spec.kind == KIND_ACTOR_CALL and spec.task_id in self.cancelled:
                raise E.TaskCancelledError(spec.task_id.hex())  # cancelled while it ran
            if spec.num_returns in (STREAMING, DYNAMIC):
                return self._stream(conn, spec, result)
            if inspect.isgenerator(result):
                return P.PushTaskReply(spec.task_id, self._returns_from_generator(spec, result), [])
            returns = self._pack_returns(spec, result)
            return P.PushTaskReply(spec.task_id, returns, [])
        except E.TaskCancelledError as e:
            if spec.task_id not in self.cancelled:  # a child's cancellation, raised by get(): its error
                return self._error_reply(spec, self._task_error(spec, e), "app")
            return self._error_reply(spec, E.TaskCancelledError(spec.task_id.hex()), "cancelled")
        except SystemExit as e:
            if self.actor_spec is not None and spec.kind == KIND_ACTOR_CALL:
                self._exit_actor(conn, spec)
            raise e
        except BaseException as e:  # noqa: BLE001
            if isinstance(e, KeyboardInterrupt) and spec.task_id in self.cancelled:
                return self._interrupted_reply(spec, e)
            return self._error_reply(spec, self._task_error(spec, e), "app")
        finally:
            self._interruptible = None
            self.ctx.task_threads.pop(spec.task_id, None)

    # ------------------------------------------------------------ compiled graphs
    def _graph_host(self) -> GraphHost:
        if self.cgraph is None:
            self.cgraph = GraphHost(self.client.token, self.client.node_ip, os.getpid(),
                                    os.path.join(self.client.session_dir, "sockets"))
        return self.cgraph

    def _cgraph_open(self, graph_id: str) -> dict:
        name = f"{type(self.actor).__name__}({self.actor_spec.actor_id.hex()[:8]})"
        return self._graph_host().open(graph_id, name)

    def _cgraph_start(self, plan: dict) -> bool:
        return self._graph_host().start(plan, self.actor, self.actor_loop)

    def _cgraph_abort(self, graph_id: str) -> bool:
        return self._graph_host().abort(graph_id)

    def _terminate_actor(self) -> None:
        """`handle.__ray_terminate__.remote()`: end this actor for good (no restart).

        The atexit handlers run before the head hears of it: once it has, the node may end
        this process at any moment (on a loaded machine that came first, and they never ran)."""
        _run_atexit_handlers()
        with contextlib.suppress(Exception):
            self.client.run_sync(self.client.head.request(P.KillActor(
                self.actor_spec.actor_id, True, False, "ended by __ray_terminate__ (the actor was asked to exit)")),
                timeout=5)
        self.exit_gracefully()

    def run_exit_handlers(self) -> None:
        """Run the process's atexit handlers now, once: before the actor's end is reported,
        after which the node may end this process before they could run."""
        _run_atexit_handlers()

    def exit_gracefully(self) -> None:
        """End this actor's process on purpose: its atexit handlers run first, as in Ray (a
        kill does not run them), then the output is flushed."""
        _run_atexit_handlers()
        self._drain_output()
        os._exit(0)

    def _exit_actor(self, conn, spec: TaskSpec) -> None:
        # its atexit handlers run now, while the process is whole: once the actor's end is known
        # the node may end the process before the interpreter's own exit would run them
        _run_atexit_handlers()
        err = E.ActorDiedError("The actor exited on purpose (exit_actor() was called).")
        self.client.loop.call_soon_threadsafe(lambda: None)
        raise SystemExit(0) from err

    def _task_error(self, spec: TaskSpec, e: BaseException) -> BaseException:
        self._last_error.text = f"{type(e).__name__}: {e}"[:2000]
        user_tb = e.__traceback__.tb_next if e.__traceback__ else None  # from the user's frame on
        self._last_error.traceback = "".join(traceback.format_exception(type(e), e, user_tb))[-8000:]
        if isinstance(e, E.RayTaskError):
            tb = traceback.format_exc()
            return E.RayTaskError(spec.display_name(), tb, e.cause or e, "", os.getpid(), self.client.node_ip).as_instanceof_cause()
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__.tb_next if e.__traceback__ else None))
        try:
            ser.serialize(e)
            cause: BaseException = e
        except Exception as why:  # noqa: BLE001  unpicklable exception: keep its text, in Ray's words
            err_type = f"{type(e).__module__}.{type(e).__name__}"
            cause = E.RayError(f"Exception {err_type} isn't serializable: {why}.\n"
                               f"Original exception details:\n{tb}")
        return E.RayTaskError(spec.display_name(), tb, cause, "", os.getpid(), self.client.node_ip).as_instanceof_cause()

    def _interrupted_reply(self, spec: TaskSpec, interrupt: BaseException) -> P.PushTaskReply:
        """A running task the cancellation interrupted: as in Ray, its result is a RayTaskError
        that is also a TaskCancelledError (with the task's traceback, so the caller sees where
        it stopped), and the task counts as finished, not failed: it ran, and is not retried."""
        cancelled = E.TaskCancelledError(spec.task_id.hex()).with_traceback(interrupt.__traceback__)
        tb = "".join(traceback.format_exception(type(cancelled), cancelled, cancelled.__traceback__))
        err = E.RayTaskError(spec.display_name(), tb, cancelled, "", os.getpid(),
                             self.client.node_ip).as_instanceof_cause()
        return self._error_reply(spec, err, "interrupted")

    def _error_reply(self, spec: TaskSpec, err: BaseException, kind: str) -> P.PushTaskReply:
        payload = ser.serialize(err, kind=ser.KIND_ERROR).to_inline()
        if spec.num_returns in (STREAMING, DYNAMIC):
            return P.PushTaskReply(spec.task_id, [[b"", "e", payload]], [], kind)
        return P.PushTaskReply(spec.task_id, [[oid, "e", payload] for oid in spec.return_ids()], [], kind)

    def _callable(self, spec: TaskSpec):
        if spec.kind == KIND_ACTOR_CALL:
            if self.actor is None:
                raise E.RaySystemError("this worker hosts no actor")
            if spec.method_name == "__ray_ready__":
                return _ready
            if spec.method_name == "__ray_call__":  # Ray's: run fn(actor_instance, *args) in the actor
                instance = self.actor
                return lambda fn, *args, **kwargs: fn(instance, *args, **kwargs)
            if spec.method_name == "__ray_terminate__":
                return self._terminate_actor
            if spec.method_name in _CGRAPH_CALLS:
                return getattr(self, _CGRAPH_CALLS[spec.method_name])
            name = spec.method_name
            if name in getattr(self.actor, "__dict__", ()):
                # an attribute of the instance shadows the method (`self.is_done = False` beside
                # `def is_done`): the call is to the class's method, as in Ray
                attr = getattr(type(self.actor), name, None)
                if callable(attr) and hasattr(attr, "__get__"):
                    return attr.__get__(self.actor, type(self.actor))
            try:
                return getattr(self.actor, name)
            except AttributeError:
                raise AttributeError(f"'{type(self.actor).__name__}' object has no attribute "
                                     f"'{spec.method_name}'") from None
        return self.client.load_function(spec.function.function_id)

    def _store(self, object_id: bytes, value: Any, spec: TaskSpec | None = None) -> list:
        so = ser.serialize(value, what=f"the return value of {self.ctx.task_name}")
        if so.contained_refs:
            self._pin_for_caller(so.contained_refs)
        spec = spec or self.ctx.current_spec  # the caller owns what its task returns
        kind, payload = self.client._store_value(object_id, so, spec.owner_address if spec else "")
        if so.contained_refs:  # the caller keeps them alive while the returned object lives
            return [object_id, kind, payload, [[r._id, r._owner] for r in so.contained_refs]]
        return [object_id, kind, payload]

    def _pin_for_caller(self, refs: list) -> None:
        """Refs inside a return value: register the caller as their borrower before replying."""
        spec = self.ctx.current_spec
        caller = spec.owner_address if spec else ""
        for r in refs:
            if r._owner == self.client.address:
                with self.client._lock:
                    self.client.refs.add_borrower(r._id, caller)
            elif r._owner != caller:
                with contextlib.suppress(Exception):
                    conn = self.client.run_sync(self.client.connection(r._owner))
                    self.client.run_sync(conn.request(P.AddBorrower([r._id], caller)))

    def _pack_returns(self, spec: TaskSpec, result: Any) -> list:
        ids = spec.return_ids()
        if spec.num_returns == 0:
            return []
        if spec.num_returns == 1:
            return [self._store(ids[0], result, spec)]
        if not isinstance(result, (tuple, list)) or len(result) != spec.num_returns:
            raise ValueError(f"Task {spec.display_name()} has num_returns={spec.num_returns} but returned "
                             f"{type(result).__name__} {'of length ' + str(len(result)) if hasattr(result, '__len__') else ''}; "
                             f"return a tuple of {spec.num_returns} values.")
        return [self._store(oid, v, spec) for oid, v in zip(ids, result)]

    def _returns_from_generator(self, spec: TaskSpec, gen: Any) -> list:
        """A generator task with a static `num_returns=N`: its i-th value is return i.

        As in Ray: when the generator raises after k < N values, the first k returns hold
        those values and the rest hold the task's error; when it yields fewer than N values
        the rest hold a ValueError; when it yields more than N, or raises after N, the N
        returns stand and the error is only written to the task's stderr (the caller can no
        longer be told)."""
        ids = spec.return_ids()
        returns: list = []
        try:
            for value in gen:
                if len(returns) == len(ids):
                    raise ValueError(f"Task returned more than num_returns={len(ids)} objects.")
                returns.append(self._store(ids[len(returns)], value, spec))
        except BaseException as e:  # noqa: BLE001
            if isinstance(e, (SystemExit, KeyboardInterrupt)) and len(returns) < len(ids):
                raise
            if len(returns) == len(ids):
                sys.stderr.write(f"Unhandled error: Task threw exception, but all {len(ids)} return "
                                 "values already created. This should only occur when using "
                                 "generator tasks.\n" + "".join(traceback.format_exception(e)))
                sys.stderr.flush()
                return returns
            payload = ser.serialize(self._task_error(spec, e), kind=ser.KIND_ERROR).to_inline()
            return returns + [[oid, "e", payload] for oid in ids[len(returns):]]
        if len(returns) < len(ids):
            short = ValueError(f"Task returned {len(returns)} objects, but num_returns={len(ids)}.")
            payload = ser.serialize(self._task_error(spec, short), kind=ser.KIND_ERROR).to_inline()
            returns += [[oid, "e", payload] for oid in ids[len(returns):]]
        return returns

    def _stream(self, conn, spec: TaskSpec, result: Any) -> P.PushTaskReply:
        if not inspect.isgenerator(result) and not hasattr(result, "__iter__"):
            raise TypeError(f"{spec.display_name()} has num_returns='streaming' but returned "
                            f"{type(result).__name__}, not a generator; use `yield`.")
        index = 0
        for value in result:
            oid = ObjectID.for_return(spec.task_id, index + 2)
            item = self._store(oid, value, spec)
            msg = P.GeneratorItem(spec.task_id, index, item)
            # the same FIFO as the task's reply (_reply): an item sent by its own loop callback
            # could leave after a reply drained by an already scheduled batch, and the owner
            # would close the generator without it
            self.client.call_soon(_send_quietly, conn, msg)
            index += 1
        return P.PushTaskReply(spec.task_id, [[b"", "n", index]], [])

    # ------------------------------------------------------------ actors
    def _create_actor(self, conn, rid: int, spec: TaskSpec) -> None:
        self._enter(spec)
        self.ctx.actor_id = spec.actor_id
        self.ctx.actor_name = spec.actor_name
        self.ctx.namespace = spec.namespace
        self.ctx.assigned_resources = spec.resources
        self.actor_spec = spec
        self.log_prefix = f"({spec.function.qualname.rsplit('.', 1)[-1]} pid={os.getpid()}, ip={self.client.node_ip}) "
        try:
            if self.setup_error is not None:
                raise self.setup_error
            self._run_setup_hook(spec)
            cls = self.client.load_function(spec.function.function_id)
            args, kwargs = self._resolve_args(spec)
            self.actor = cls.__new__(cls)
            if spec.is_async:
                default = actor_groups.AsyncGroup(actor_groups.DEFAULT, spec.max_concurrency)
                self.actor_loop, self.actor_sema = default.loop, default.sema
                fut = asyncio.run_coroutine_threadsafe(_call_init(self.actor, args, kwargs), self.actor_loop)
                fut.result()
            else:
                self.actor.__init__(*args, **kwargs)
                default = None
            self.groups = actor_groups.ConcurrencyGroups(
                spec.concurrency_groups or {}, spec.max_concurrency, spec.is_async, default)
            self.actor_pool = None if spec.is_async else self.groups.pool(actor_groups.DEFAULT)
        except BaseException as e:  # noqa: BLE001
            err = self._task_error(spec, e)
            self._record_end(spec, P.CreateActorReply(False))
            self._reply(conn, rid, P.CreateActorReply(False, ser.serialize(err).to_inline()))
            return
        self._record(spec, "FINISHED")
        self._idle_title()
        self._reply(conn, rid, P.CreateActorReply(True))

    async def _run_async_call(self, conn, rid: int, spec: TaskSpec, sema: asyncio.Semaphore) -> None:
        task = asyncio.current_task()
        self.async_calls[spec.task_id] = (asyncio.get_running_loop(), task)
        try:
            if spec.task_id in self.cancelled:  # cancelled before it got here
                task.cancel()  # type: ignore[union-attr]
            await self._run_async_call_now(conn, rid, spec, sema)
        finally:
            self.async_calls.pop(spec.task_id, None)

    async def _run_async_call_now(self, conn, rid: int, spec: TaskSpec, sema: asyncio.Semaphore) -> None:
        if self.exiting:
            return
        if sema.locked():  # every slot is taken: it waits at the actor, as Ray's state shows
            self._record(spec, "PENDING_ACTOR_TASK_ORDERING_OR_CONCURRENCY")
        try:
            await sema.acquire()
        except asyncio.CancelledError:  # cancelled while waiting for a free slot: it never ran
            reply = self._error_reply(spec, E.TaskCancelledError(spec.task_id.hex()), "cancelled")
            self._record_end(spec, reply)
            self._reply(conn, rid, reply)
            return
        if self.exiting:  # exit_actor() was called while this call waited for its slot
            sema.release()
            return
        try:
            self._enter(spec)
            try:
                method = self._callable(spec)
                held: list = []  # the argument refs, alive until the call returns
                if spec.arg_refs or spec.args[0] == "ref":
                    args, kwargs = await asyncio.get_running_loop().run_in_executor(
                        None, self._resolve_args, spec, held)
                else:
                    args, kwargs = self._resolve_args(spec, held)
                if inspect.iscoroutinefunction(method):
                    result = await method(*args, **kwargs)
                elif inspect.isasyncgenfunction(method):
                    result = await _drain_async_gen(method(*args, **kwargs))
                else:
                    result = method(*args, **kwargs)
                if spec.num_returns in (STREAMING, DYNAMIC):
                    reply = self._stream(conn, spec, result)
                elif inspect.isgenerator(result) or inspect.isasyncgenfunction(method):
                    reply = P.PushTaskReply(spec.task_id, self._returns_from_generator(spec, result), [])
                else:
                    reply = P.PushTaskReply(spec.task_id, self._pack_returns(spec, result), [])
            except asyncio.CancelledError:
                reply = self._error_reply(spec, E.TaskCancelledError(spec.task_id.hex()), "cancelled")
            except BaseException as e:  # noqa: BLE001
                reply = self._error_reply(spec, self._task_error(spec, e), "app")
            self._record_end(spec, reply)
            self._reply(conn, rid, reply)
        finally:
            sema.release()

    # ------------------------------------------------------------ output
    def _redirect_output(self) -> None:
        client = self.client
        self._output = OutputForwarder(
            client.loop, client._thread, client._send_node, os.path.join(self.request["session_dir"], "logs"),
            f"worker-{client.worker_id.hex()[:16]}-{os.getpid()}", lambda: (self.ctx.job_id, self.log_prefix))
        self._output.start()


# built-in actor methods that set up this actor's part of a compiled graph (raylite.dag)
_CGRAPH_CALLS = {"__raylite_cgraph_open__": "_cgraph_open", "__raylite_cgraph_start__": "_cgraph_start",
                 "__raylite_cgraph_abort__": "_cgraph_abort"}


def _ready() -> bool:
    return True


async def _drain_async_gen(agen: Any) -> Any:
    """Run an async generator to its end; give back a plain generator that yields the same
    values and then raises what the async one raised (so a mid-way error is not lost)."""
    items: list = []
    try:
        async for item in agen:
            items.append(item)
    except Exception as e:  # noqa: BLE001
        return _replay(items, e)
    return _replay(items, None)


def _replay(items: list, error: BaseException | None) -> Any:
    yield from items
    if error is not None:
        raise error


async def _call_init(actor: Any, args: tuple, kwargs: dict) -> None:
    result = actor.__init__(*args, **kwargs)
    if inspect.isawaitable(result):
        await result


def _send_reply(conn, msg: P.Message, rid: int) -> None:
    with contextlib.suppress(Exception):
        conn.send(msg, rid)


def _send_quietly(conn, msg: P.Message) -> None:
    with contextlib.suppress(Exception):
        conn.send(msg)


def main(request: dict) -> None:
    worker = Worker(request)
    proctitle.set_title(proctitle.IDLE)
    worker.run()


def _run_atexit_handlers() -> None:
    """Run the process's atexit handlers now, once (they are cleared after): os._exit skips them."""
    import atexit

    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    atexit._clear()
