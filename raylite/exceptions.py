"""Every public raylite error, under Ray's names.

Hierarchy::

    RayError
      RayTaskError                 user code raised; subclass of the user's type too
      RayActorError                the actor is gone
        ActorDiedError
        ActorUnavailableError
      WorkerCrashedError           the worker process died while running a task
      TaskCancelledError
      GetTimeoutError              (also a TimeoutError)
      ObjectLostError
        OwnerDiedError
        ObjectReconstructionFailedError
        ObjectFetchTimedOutError
      ObjectStoreFullError
      OutOfMemoryError
      NodeDiedError
      RaySystemError
      RuntimeEnvSetupError
      TaskUnschedulableError / ActorUnschedulableError / InfeasibleResourceError
      PlacementGroupSchedulingError
      ObjectSerializationError     (also a TypeError)

Errors say who, what and the next step: each message names the task or object
and, where there is one, the fix.
"""

from __future__ import annotations

from typing import Any


class RayError(Exception):
    """Base class of every raylite error."""

    def to_bytes(self) -> bytes:
        """The error as bytes (pickled, with its formatted traceback for when it cannot be
        unpickled again): Ray's to_bytes/from_bytes pair, for code that stores errors."""
        import pickle
        import traceback as tb

        text = "\n".join(tb.format_exception(type(self), self, self.__traceback__))
        try:
            body = pickle.dumps(self)
        except Exception:  # noqa: BLE001 - kept as text only
            body = b""
        return pickle.dumps({"language": "PYTHON", "serialized_exception": body,
                             "formatted_exception_string": text})

    @staticmethod
    def from_bytes(b: bytes) -> BaseException:
        import pickle

        return RayError.from_ray_exception(pickle.loads(b))

    @staticmethod
    def from_ray_exception(ray_exception: Any) -> BaseException:
        import pickle

        get = ray_exception.get if isinstance(ray_exception, dict) else lambda k, d=None: getattr(ray_exception, k, d)
        try:
            return pickle.loads(get("serialized_exception"))
        except Exception:  # noqa: BLE001 - the original text survives
            return UnserializableException(get("formatted_exception_string", "No formatted exception string available."))


class RaySystemError(RayError):
    """raylite itself failed (a bug or a broken installation)."""


class CrossLanguageError(RayError):
    """Kept for API parity; raylite is Python only."""


class RayTaskError(RayError):
    """A task or actor method raised.

    `get()` raises an instance of a class that derives from both RayTaskError and
    the user's exception type, so ``except ValueError`` still works; the remote
    traceback is part of the message and kept in ``traceback_str``.
    """

    def __init__(
        self,
        function_name: str = "",
        traceback_str: str = "",
        cause: BaseException | None = None,
        proctitle: str = "",
        pid: int = 0,
        ip: str = "",
    ) -> None:
        self.function_name = function_name
        self.traceback_str = traceback_str
        self.cause = cause
        self.proctitle = proctitle
        self.pid = pid
        self.ip = ip
        Exception.__init__(self, self._message())

    def _message(self) -> str:
        head = f"{type(self.cause).__name__ if self.cause else 'Error'} in {self.function_name}"
        where = f" (pid={self.pid}, ip={self.ip})" if self.pid else ""
        return f"{head}{where}\n{self.traceback_str}".rstrip()

    def __str__(self) -> str:
        return self._message()

    def make_dual_exception_instance(self) -> RayTaskError:
        """An instance of both RayTaskError and the cause's type; TypeError when the cause's
        class cannot be subclassed (Ray's method; as_instanceof_cause() falls back instead)."""
        if self.cause is not None and _dual_class(type(self.cause)) is None:
            raise TypeError(f"cannot subclass {type(self.cause).__name__} with RayTaskError")
        return self.as_instanceof_cause()

    def as_instanceof_cause(self) -> RayTaskError:
        """An error that is both a RayTaskError and an instance of the cause's type."""
        cause = self.cause
        if cause is None or isinstance(self, type(cause)):
            return self
        cls = _dual_class(type(cause))
        if cls is None:
            return self
        err = cls.__new__(cls)
        err.__dict__.update(getattr(cause, "__dict__", {}))
        err.args = cause.args
        err.function_name = self.function_name
        err.traceback_str = self.traceback_str
        err.cause = cause
        err.proctitle = self.proctitle
        err.pid = self.pid
        err.ip = self.ip
        return err

    def __reduce__(self) -> Any:
        return (
            _rebuild_task_error,
            (self.function_name, self.traceback_str, self.cause, self.pid, self.ip),
        )


def _rebuild_task_error(
    function_name: str, traceback_str: str, cause: BaseException | None, pid: int, ip: str
) -> RayTaskError:
    return RayTaskError(function_name, traceback_str, cause, "", pid, ip).as_instanceof_cause()


_DUAL_CLASSES: dict[type, type] = {}


def _dual_class(cause_cls: type) -> type | None:
    cls = _DUAL_CLASSES.get(cause_cls)
    if cls is not None:
        return cls
    if issubclass(cause_cls, RayTaskError):
        return None
    try:
        cls = type(
            f"RayTaskError({cause_cls.__name__})",
            (RayTaskError, cause_cls),
            {
                "__init__": RayTaskError.__init__,
                "__str__": RayTaskError.__str__,
                "__reduce__": RayTaskError.__reduce__,
                "__module__": __name__,
            },
        )
    except TypeError:  # e.g. layout conflicts with some builtin exception types
        return None
    _DUAL_CLASSES[cause_cls] = cls
    return cls


class RayActorError(RayError):
    """The actor died or cannot be reached; calls to it fail with this."""

    def __init__(self, message: str = "The actor died unexpectedly.", actor_id: str = "") -> None:
        self.actor_id = actor_id
        self.error_msg = message
        super().__init__(message)


class ActorDiedError(RayActorError):
    """The actor process is gone and will not restart."""


class ActorUnavailableError(RayActorError):
    """The actor is restarting or unreachable right now; a retry may succeed."""


class ActorUnschedulableError(RayError):
    """The actor's resource request can never be met by this cluster."""


class TaskUnschedulableError(RayError):
    """The task's resource request can never be met by this cluster."""


class InfeasibleResourceError(TaskUnschedulableError):
    """A resource request larger than any node of the cluster could ever offer."""


class WorkerCrashedError(RayError):
    """The worker process died while running the task (killed, crashed, or exited)."""

    def __init__(self, message: str = "The worker died unexpectedly while executing this task.") -> None:
        super().__init__(message)


class LocalRayletDiedError(RayError):
    """The local node daemon died."""


class NodeDiedError(RayError):
    """A node of the cluster died."""


class TaskCancelledError(RayError):
    """The task was cancelled with raylite.cancel()."""

    def __init__(self, task_id: str = "") -> None:
        self.task_id = task_id
        super().__init__(f"Task {task_id} was cancelled." if task_id else "This task was cancelled.")

    def __reduce__(self) -> Any:
        # rebuilt from its fields, not from the formatted message (which would be wrapped twice)
        return (type(self), (self.task_id,), self.__dict__)


class GetTimeoutError(RayError, TimeoutError):
    """get() or wait() ran past its timeout."""


class ObjectLostError(RayError):
    """The object's value is gone and cannot be rebuilt."""

    def __init__(self, object_ref_hex: str = "", reason: str = "") -> None:
        self.object_ref_hex = object_ref_hex
        self.reason = reason
        msg = f"Object {object_ref_hex} was lost"
        msg += f": {reason}" if reason else "."
        super().__init__(msg)

    def __reduce__(self) -> Any:
        # errors cross processes pickled: rebuild from the fields, not from the formatted message
        # (Exception's default passes args, the message, back as object_ref_hex: "Object Object ...
        # was lost was lost")
        return (type(self), (self.object_ref_hex, self.reason), self.__dict__)


class OwnerDiedError(ObjectLostError):
    """The process that owned the object (created it) died."""


class ObjectReconstructionFailedError(ObjectLostError):
    """Re-running the task that made the object failed."""


class ObjectReconstructionFailedMaxAttemptsExceededError(ObjectReconstructionFailedError):
    """The task that made the object was already re-run `max_retries` times to rebuild it."""


class ObjectReconstructionFailedLineageEvictedError(ObjectReconstructionFailedError):
    """What re-running the task needs (an argument and its lineage) is gone."""


class ObjectFetchTimedOutError(ObjectLostError):
    """Fetching the object from another node timed out."""


class ReferenceCountingAssertionError(ObjectLostError):
    """The object was freed while still referenced (a raylite bug)."""


class ObjectStoreFullError(RayError):
    """The object store and its spill space are both full."""


class OutOfMemoryError(RayError):
    """The node ran low on memory and the worker running this task was killed."""


class OutOfDiskError(RayError):
    """The node's disk is full."""


class RuntimeEnvSetupError(RayError):
    """The task's runtime_env could not be set up."""


class PlacementGroupSchedulingError(RayError):
    """A placement group can never be placed on this cluster."""


class ObjectSerializationError(RayError, TypeError):
    """A value could not be serialized; the message says which part and why."""


class PendingCallsLimitExceeded(RayError):
    """Too many calls are pending on an actor (max_pending_calls)."""


class AsyncioActorExit(RayError):
    """Raised inside an async actor to make it exit."""


class RayChannelError(RayError):
    """A compiled graph's channel failed or the graph was torn down."""


class RayChannelTimeoutError(RayChannelError, TimeoutError):
    """A compiled graph did not accept an execution, or produce a result, in time."""


class RayCgraphCapacityExceeded(RayError):
    """A compiled graph holds as many unread results as it is allowed to: ray.get() some."""


# ---- the rest of Ray 2.60's public exceptions, so `except ray.exceptions.X` and imports of them
# work; raylite raises the ones whose situation it has (the others exist for catching code)


class ActorAlreadyExistsError(ValueError, RayError):
    """A named actor of that name already exists (get_if_exists=False)."""

    def __init__(self, error_message: str = "") -> None:
        self.error_message = error_message
        super().__init__(error_message)


class ActorHandleNotFoundError(ValueError, RayError):
    """The actor handle is not known to this process."""

    def __init__(self, error_message: str = "") -> None:
        self.error_message = error_message
        super().__init__(error_message)


class ActorPlacementGroupRemoved(RayError):
    """The placement group the actor was placed in was removed."""


class TaskPlacementGroupRemoved(RayError):
    """The placement group the task was placed in was removed."""


class AuthenticationError(RayError):
    """The cluster refused this process's token."""

    def __init__(self, message: str = "") -> None:
        self.message = message
        super().__init__(message)


class ObjectFreedError(ObjectLostError):
    """The object was freed explicitly (`ray._private.internal_api.free`) and cannot be read."""

    def __init__(self, object_ref_hex: str = "", owner_address: Any = None, call_site: str = "",
                 reason: str = "it was freed explicitly") -> None:
        super().__init__(object_ref_hex, reason)
        self.owner_address = owner_address
        self.call_site = call_site

    def __reduce__(self) -> Any:
        return (type(self), (self.object_ref_hex, self.owner_address, self.call_site, self.reason),
                self.__dict__)


class ObjectRefStreamEndOfStreamError(RayError):
    """A streaming generator has no more items."""


class OufOfBandObjectRefSerializationException(RayError):
    """An ObjectRef was pickled out of band (Ray's spelling, kept)."""


class PlasmaObjectNotAvailable(RayError):
    """The object is not in the shared-memory store yet."""


class RpcError(RayError):
    """A remote call between cluster processes failed."""

    def __init__(self, message: str = "", rpc_code: Any = None) -> None:
        self.rpc_code = rpc_code
        super().__init__(message)


class RayDirectTransportError(RaySystemError):
    """A tensor transport between actors failed."""


class StreamingGeneratorReplayInconsistentError(RaySystemError):
    """A retried streaming generator yielded different items than before."""


class UnserializableException(RayError):
    """A task raised an exception that cannot be pickled; its stack trace travels as text."""

    def __init__(self, original_stack_trace: str = "") -> None:
        self.original_stack_trace = original_stack_trace
        super().__init__(original_stack_trace)

    def __str__(self) -> str:
        return ("Failed to deserialize exception. Refer to https://docs.ray.io/en/latest/ray-core/objects/"
                f"serialization.html#custom-serializers-for-exceptions for more information.\n"
                f"Original exception:\n{self.original_stack_trace}")


class UserCodeException(RayError):
    """An exception raised by user code (a marker base in Ray)."""


__all__ = [name for name, obj in list(globals().items()) if isinstance(obj, type) and issubclass(obj, BaseException)]
