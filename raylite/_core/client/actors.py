"""Actor calls of a CoreClient: ordered per caller, sent straight to the actor's worker,
reconnected after restarts, failed clearly when the actor is dead.

A component: it owns the state of every actor this process calls (its connection, queue
and calls in flight); replies go back to the task submitter as any task's do."""

from __future__ import annotations

import asyncio
import collections
import contextlib
from typing import TYPE_CHECKING, Any

from raylite import exceptions as E
from raylite._core import protocol as P
from raylite._core import serialization as ser
from raylite._core.client.records import ActorState, TaskRecord
from raylite._core.ids import ObjectID
from raylite._core.task_spec import TaskSpec
from raylite._core.transport.base import ConnectionBrokenError

if TYPE_CHECKING:
    from raylite._core.client.links import ClientLinks
    from raylite._core.client.tasks import TaskSubmitter


# the return index of an actor's handle token, under its creation task's id (ActorCaller.handle_token)
HANDLE_TOKEN_INDEX = ObjectID.HANDLE_TOKEN_INDEX
# how long calls whose actor's link dropped wait for the head to say why it went (exit_actor(),
# ray.kill(), its node's death) before they fail with what this side knows
LOST_CALL_VERDICT_S = 2.0


class ActorCaller:
    """Actor method calls; owns the per-actor state, by actor id."""

    def __init__(self, links: ClientLinks, tasks: TaskSubmitter) -> None:
        self._links = links
        self._tasks = tasks
        self.states: dict[bytes, ActorState] = {}
        # handle token object id -> actor id, for the actors this process created (handle_token)
        self.tokens: dict[bytes, bytes] = {}

    # ------------------------------------------------------------ handle lifetime
    def handle_token(self, actor_id: bytes, creation_task_id: bytes) -> bytes:
        """The id of an object this process owns, counted once, that stands for the actor's
        strong handles (the caller makes the one ref that count is for).

        Every strong handle holds a ref to it, and a handle sent in a task's arguments, a
        return or a put carries it, so the ownership protocol (borrowers, refs held by
        running tasks and by stored objects) counts the handles in every process, as Ray
        does. When the object is freed, no strong handle is left anywhere and the actor ends
        (tokens_freed). It has no value: nobody gets it.
        """
        oid = bytes(ObjectID.for_return(creation_task_id, HANDLE_TOKEN_INDEX))
        links = self._links
        with links.lock:
            links.refs.own(oid)
            links.refs.add_local(oid, links.address)
        self.tokens[oid] = bytes(actor_id)
        return oid

    def tokens_freed(self, freed: list) -> None:
        """Any thread (ObjectPlane.release): the last strong handle of these actors is gone."""
        tokens = self.tokens
        if not tokens:
            return
        for oid in freed:
            actor_id = tokens.pop(oid, None)
            if actor_id is not None:
                self._links.call_soon(self.actor_out_of_scope, actor_id)

    def drop_queued(self, rec: TaskRecord) -> None:
        """A cancelled call not sent yet leaves its actor's queue."""
        for st in self.states.values():
            if rec in st.queue:
                st.queue.remove(rec)
                if rec.actor_args_waited:  # the calls behind it need not wait for its arguments
                    self._links.call_soon(self._flush_actor, st)

    def holds_none(self) -> bool:
        return not self.states

    def node_died(self, node_id: bytes) -> None:
        """Links to actors on a dead node may hang (cut cable): drop them; they reconnect."""
        for st in self.states.values():
            if st.node_id == node_id and st.conn is not None:
                st.conn.abort()

    def register_actor(self, spec: TaskSpec, get_if_exists: bool) -> P.RegisterActorReply:
        reply: P.RegisterActorReply = self._links.run_sync(self._links.head.request(P.RegisterActor(spec.to_wire(), get_if_exists)))
        if reply.error_type:
            raise getattr(E, reply.error_type, None) or ValueError(reply.error) if reply.error_type != "ValueError" else ValueError(reply.error)
        return reply

    def submit_actor_task(self, spec: TaskSpec, pinned: list, held: tuple[bytes, ...] = ()) -> Any:
        """`held`: refs the call keeps alive until it is answered (its handle's token: a call in
        flight keeps its actor, as in Ray, even when the handle it went through is dropped)."""
        if held:
            links = self._links
            with links.lock:
                links.refs.add_submitted(list(held))
            pinned = [*pinned, *held]
        return self._tasks.submit_task(spec, pinned, False)

    def send_actor_task(self, rec: TaskRecord) -> None:
        aid = rec.spec.actor_id
        st = self.states.get(aid)
        if st is None:
            st = self.states[aid] = ActorState(aid)
        if st.dead_error is not None:
            self._tasks.finish_with_error(rec, st.dead_error)
            return
        st.queue.append(rec)
        self._flush_actor(st)

    def _flush_actor(self, st: ActorState) -> None:
        if st.conn is None or st.conn.is_closed():
            if not st.connecting:
                st.connecting = True
                self._links.loop.create_task(self._connect_actor(st))
            return
        if not st.in_order:
            self._flush_out_of_order(st)
            return
        while st.queue:
            rec = st.queue[0]
            if rec.cancelled:
                st.queue.popleft()
                continue
            if rec.spec.arg_refs and not self._args_ready(st, rec):
                return  # this caller's later calls wait behind it: they run in submission order
            st.queue.popleft()
            self._push(st, rec)

    def _flush_out_of_order(self, st: ActorState) -> None:
        """An async or threaded actor does not run calls in order (as in Ray): each call goes
        as soon as its own arguments are ready; one waiting holds up no other."""
        waiting = collections.deque()
        while st.queue:
            rec = st.queue.popleft()
            if rec.cancelled:
                continue
            if rec.spec.arg_refs and not self._args_ready(st, rec):
                waiting.append(rec)
                continue
            self._push(st, rec)
        st.queue = waiting

    def _push(self, st: ActorState, rec: TaskRecord) -> None:
        st.seq += 1  # one connection per caller keeps calls in order; no per-call copy needed
        st.in_flight[rec.spec.task_id] = rec
        rec.worker_conn = st.conn
        fut = st.conn.request_future(P.PushTask(rec.spec.to_wire()))
        fut.add_done_callback(lambda f, rec=rec, st=st: self._on_actor_reply(st, rec, f))

    def _args_ready(self, st: ActorState, rec: TaskRecord) -> bool:
        """Are the call's arguments that this process owns computed? As in Ray, a call is sent
        only then: an actor never sits blocked on one caller's slow argument while another
        caller's ready call waits behind it. If not, the actor's queue flushes again once they
        are (one wait registered per call)."""
        objects = self._tasks._objects
        with self._links.lock:
            pending = [e for r in rec.spec.arg_refs if (e := objects.entry(r[1])) is not None and e.kind is None]
            if not pending or rec.actor_args_waited:
                return not pending
            rec.actor_args_waited = True
            left = [len(pending)]
            loop = self._links.loop

            def one_ready(_entry) -> None:
                left[0] -= 1
                if left[0] == 0:
                    loop.call_soon_threadsafe(self._args_now_ready, st, rec)

            for e in pending:
                e.add_waiter(one_ready)
        return False

    def _args_now_ready(self, st: ActorState, rec: TaskRecord) -> None:
        rec.actor_args_waited = False  # should one be lost again before it is sent, wait anew
        self._flush_actor(st)

    async def _connect_actor(self, st: ActorState) -> None:
        try:
            while True:
                info: P.ActorInfo = await self._links.head.request(P.GetActorInfo(st.actor_id, True, st.restarts_seen))
                if info.state == "DEAD":
                    self._actor_is_dead(st, info)
                    return
                st.restarts_seen = info.num_restarts
                st.node_id = info.node_id
                st.in_order = info.in_order
                try:
                    conn = await self._links.connection(info.address)
                except ConnectionBrokenError:
                    await asyncio.sleep(0.05)
                    continue
                st.conn = conn
                conn.on_close.append(lambda c, st=st: self._actor_conn_lost(st, c))
                self._fail_lost_calls(st, None)  # it restarted: the calls that ran are lost
                break
        except Exception as e:  # noqa: BLE001
            self._actor_is_dead(st, None, str(e))
            return
        finally:
            st.connecting = False
        self._flush_actor(st)

    @staticmethod
    def _death_error(st: ActorState, info: P.ActorInfo | None, why: str = "") -> E.RayError:
        cause = (info.death_cause if info else why) or "The actor died."
        if info is not None and info.creation_error is not None:
            try:
                init_err = ser.from_inline(info.creation_error)
                cause = f"{cause}\n{init_err}"
            except Exception:  # noqa: BLE001
                pass
        name = info.class_name if info else ""
        msg = (f"The actor {name + ' ' if name else ''}({st.actor_id.hex()[:12]}) is dead: {cause}")
        if cause.startswith("UNSCHEDULABLE: "):
            return E.ActorUnschedulableError(msg)
        return E.ActorDiedError(msg, st.actor_id.hex())

    def _actor_is_dead(self, st: ActorState, info: P.ActorInfo | None, why: str = "") -> None:
        err = self._death_error(st, info, why)
        st.dead_error = err
        self._fail_lost_calls(st, err)
        while st.queue:
            self._tasks.finish_with_error(st.queue.popleft(), err)
        for rec in list(st.in_flight.values()):
            self._tasks.finish_with_error(rec, err)
        st.in_flight.clear()

    def _actor_conn_lost(self, st: ActorState, conn) -> None:
        if st.conn is conn:
            st.conn = None
        # in-flight calls get their fate in _on_actor_reply (the futures fail with the connection)
        if st.queue and not st.connecting and st.dead_error is None:
            st.connecting = True
            self._links.loop.create_task(self._connect_actor(st))

    def actor_out_of_scope(self, actor_id: bytes) -> None:
        """Loop thread: the last handle is gone; stop the actor once submitted calls finish."""
        st = self.states.get(actor_id)
        if st is not None and (st.queue or st.in_flight):
            st.kill_when_idle = True
            return
        self._kill_quietly(actor_id)

    def _kill_quietly(self, actor_id: bytes) -> None:
        try:
            self._links.head.send(P.KillActor(actor_id, True, False, "ended: all references to the actor were removed"))
        except Exception:  # noqa: BLE001
            pass

    def _on_actor_reply(self, st: ActorState, rec: TaskRecord, fut: asyncio.Future) -> None:
        st.in_flight.pop(rec.spec.task_id, None)
        if st.kill_when_idle and not st.queue and not st.in_flight:
            st.kill_when_idle = False
            self._links.loop.call_soon(self._kill_quietly, st.actor_id)
        exc = fut.exception() if not fut.cancelled() else asyncio.CancelledError()
        if exc is None:
            self._tasks.task_done(rec, fut.result())
            return
        if st.dead_error is not None:
            self._tasks.finish_with_error(rec, st.dead_error)
            return
        if rec.cancelled:
            self._tasks.finish_with_error(rec, E.TaskCancelledError(rec.spec.task_id.hex()))
            return
        limit = rec.spec.max_task_retries
        if limit == -1 or rec.spec.attempt < limit:
            rec.spec = rec.spec.replace(attempt=rec.spec.attempt + 1)
            st.queue.appendleft(rec)
            if not st.connecting:
                st.connecting = True
                self._links.loop.create_task(self._connect_actor(st))
            return
        # the head knows why the actor went (exit_actor(), ray.kill(), its node died, ...): the
        # call fails with that once it says, or with what this side knows after a short wait
        st.lost_calls.append(rec)
        if len(st.lost_calls) == 1:
            self._links.loop.create_task(self._await_verdict(st))
        if not st.connecting:
            st.connecting = True
            self._links.loop.create_task(self._connect_actor(st))

    async def _await_verdict(self, st: ActorState) -> None:
        """Ask the head until it knows the actor is gone (its node reports the process's end
        at once): DEAD gives the cause; restarting, or no word within LOST_CALL_VERDICT_S,
        leaves the calls with what this side knows."""
        deadline = self._links.loop.time() + LOST_CALL_VERDICT_S
        err = None
        with contextlib.suppress(Exception):
            while st.lost_calls and self._links.loop.time() < deadline:
                info: P.ActorInfo = await self._links.head.request(P.GetActorInfo(st.actor_id, False, -1))
                if info.state == "DEAD":
                    err = self._death_error(st, info)
                    break
                if info.state != "ALIVE" or info.num_restarts > st.restarts_seen:
                    break  # restarting: the calls that were running are lost, whatever the cause
                await asyncio.sleep(0.05)
        self._fail_lost_calls(st, err)

    def _fail_lost_calls(self, st: ActorState, err: E.RayError | None) -> None:
        """The calls whose link dropped while they ran: `err` is the actor's death as the head
        tells it; None when it restarted, or has not said within LOST_CALL_VERDICT_S."""
        lost, st.lost_calls = st.lost_calls, []
        for rec in lost:
            self._tasks.finish_with_error(rec, err or E.ActorDiedError(
                f"The actor ({st.actor_id.hex()[:12]}) died while running {rec.spec.display_name()}: its "
                "worker process exited or was killed. If the actor has max_restarts > 0 it restarts; set "
                "max_task_retries to retry calls that were running.", st.actor_id.hex()))

    def actor_info(self, actor_id: bytes, wait_alive: bool = False) -> P.ActorInfo:
        return self._links.run_sync(self._links.head.request(P.GetActorInfo(actor_id, wait_alive, -1)))

    def kill_actor(self, actor_id: bytes, no_restart: bool) -> None:
        self._links.run_sync(self._links.head.request(P.KillActor(actor_id, no_restart)))
        if no_restart:
            self._links.run_sync(self._mark_killed(actor_id))

    async def _mark_killed(self, actor_id: bytes) -> None:
        """Calls made after kill() fail at once instead of racing the kill."""
        st = self.states.get(actor_id)
        if st is None:
            st = self.states[actor_id] = ActorState(actor_id)
        st.dead_error = E.ActorDiedError(
            f"The actor ({actor_id.hex()[:12]}) was killed by raylite.kill(no_restart=True).", actor_id.hex())
        while st.queue:
            self._tasks.finish_with_error(st.queue.popleft(), st.dead_error)
