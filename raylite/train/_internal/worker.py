"""One training worker: runs the user's loop on a thread and buffers its reports.

``WorkerRuntime`` is plain Python, so the same code runs inside a raylite actor
(``TrainWorker``) and in the in-process fake group the unit tests use. The loop runs
on its own thread so the actor stays free to answer ``poll`` while it trains.

Lifecycle: IDLE -> RUNNING -> FINISHED | FAILED (once; a restart makes new workers).
"""

from __future__ import annotations

import inspect
import os
import shutil
import socket
import tempfile
import threading
import traceback
from collections.abc import Callable
from typing import Any

import cloudpickle

from raylite.train._internal.messages import (
    WorkerError,
    WorkerMetadata,
    WorkerPoll,
    WorkerReport,
    WorkerState,
)
from raylite.train._internal.session import TrainSession, WorkerSpec, set_session
from raylite.train._internal.storage import unpack_bytes
from raylite.train.checkpoint import Checkpoint


def call_train_loop(fn: Callable[..., Any], config: dict[str, Any] | None) -> Any:
    """Ray's rule: a loop with a parameter gets the config dict, one without gets nothing."""
    try:
        takes_arg = len(inspect.signature(fn).parameters) > 0
    except (TypeError, ValueError):
        takes_arg = True
    return fn(config if config is not None else {}) if takes_arg else fn()


def _picklable(exc: BaseException) -> BaseException | None:
    try:
        cloudpickle.dumps(exc)
        return exc
    except Exception:  # noqa: BLE001 - the traceback string still travels
        return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def _node_ip(node_id: str) -> str:
    """This node's address as the cluster knows it; loopback on a one-machine cluster."""
    try:
        import raylite

        for node in raylite.nodes():
            if node.get("NodeID") == node_id and node.get("NodeManagerAddress"):
                return str(node["NodeManagerAddress"])
    except Exception:  # noqa: BLE001 - fall through to the socket's view
        pass
    return "127.0.0.1"


def local_metadata() -> WorkerMetadata:
    node_id, gpu_ids = "local", tuple[Any, ...]()
    try:
        import raylite

        if raylite.is_initialized():
            node_id = str(raylite.get_runtime_context().get_node_id())
            gpu_ids = tuple(raylite.get_gpu_ids())
    except Exception:  # noqa: BLE001 - outside a cluster (unit tests): one local node
        pass
    ip = _node_ip(node_id) if node_id != "local" else "127.0.0.1"
    return WorkerMetadata(node_id, ip, socket.gethostname(), os.getpid(), _free_port(), gpu_ids)


class WorkerRuntime:
    """Runs one rank's loop and answers polls about it."""

    def __init__(self, *, thread_local_session: bool = False) -> None:
        self._thread_local = thread_local_session
        self._cond = threading.Condition()
        self._reports: list[WorkerReport] = []
        self._state: WorkerState | None = None
        self._error: WorkerError | None = None
        self._rank = -1
        self._meta: WorkerMetadata | None = None
        self._tmpdirs: list[str] = []
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def metadata(self) -> WorkerMetadata:
        self._meta = local_metadata()
        return self._meta

    def start(self, spec: WorkerSpec, payload: tuple[Callable[..., Any], Any]) -> None:
        """Begin the loop on a thread and return at once."""
        if self._state is not None:
            raise RuntimeError("This training worker already ran; start a new worker group.")
        fn, config = payload
        self._rank = spec.rank.world_rank
        if spec.packed_checkpoint is not None:
            tmp = tempfile.mkdtemp(prefix="raylite_resume_")
            unpack_bytes(spec.packed_checkpoint, tmp)
            self._tmpdirs.append(tmp)
            spec.checkpoint = Checkpoint.from_directory(tmp)
            spec.packed_checkpoint = None
        if spec.backend is not None and hasattr(spec.backend, "prepare"):
            spec.backend.prepare(spec)  # before the call returns: the driver starts rank 0 first
        self._state = WorkerState.RUNNING
        self._thread = threading.Thread(
            target=self._run, args=(spec, fn, config), name=f"train-rank-{self._rank}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Make the loop's next ``report`` raise WorkerStopped (an in-process group's kill)."""
        self._stopping.set()

    def join(self, timeout_s: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _push(self, report: WorkerReport) -> None:
        with self._cond:
            self._reports.append(report)
            self._cond.notify_all()

    def _run(self, spec: WorkerSpec, fn: Callable[..., Any], config: Any) -> None:
        session = TrainSession(spec, self._push, stopping=self._stopping)
        set_session(session, thread_local=self._thread_local)
        state, error = WorkerState.FINISHED, None
        try:
            if spec.backend is not None:
                spec.backend.on_start(spec)
            call_train_loop(fn, config)
        except BaseException as e:  # noqa: BLE001 - every failure goes back to the driver
            meta = self._meta
            state = WorkerState.FAILED
            error = WorkerError(
                self._rank,
                traceback.format_exc(),
                _picklable(e),
                node_ip=meta.node_ip if meta else "",
                pid=os.getpid(),
            )
        finally:
            if spec.backend is not None:
                try:
                    spec.backend.on_shutdown()
                except Exception:  # noqa: BLE001 - the loop's outcome is what matters
                    pass
            set_session(None, thread_local=self._thread_local)
            for tmp in self._tmpdirs:
                shutil.rmtree(tmp, ignore_errors=True)
        with self._cond:
            self._state, self._error = state, error
            self._cond.notify_all()

    def poll(self, timeout_s: float = 1.0) -> WorkerPoll:
        """Wait up to ``timeout_s`` for a report or the end of the loop; return what is new."""
        with self._cond:
            if not self._reports and self._state is WorkerState.RUNNING:
                self._cond.wait(timeout_s)
            reports, self._reports = self._reports, []
            state = self._state or WorkerState.RUNNING
            # Reports made before the end are delivered before the end itself.
            return WorkerPoll(self._rank, state, reports, self._error)


class TrainWorker:
    """The actor class: a thin shell over WorkerRuntime (made remote by the worker group)."""

    def __init__(self) -> None:
        self._runtime = WorkerRuntime()

    def metadata(self) -> WorkerMetadata:
        return self._runtime.metadata()

    def start(self, spec: WorkerSpec, payload: tuple[Callable[..., Any], Any]) -> None:
        self._runtime.start(spec, payload)

    def poll(self, timeout_s: float = 1.0) -> WorkerPoll:
        return self._runtime.poll(timeout_s)
