"""How the A2A bridge forwards one event of an agent, and follows the answer (ADR 041).

* ``task.created`` / ``task.message`` → the SDK client's ``send_message``
  (``SendStreamingMessage`` when the card says it streams, else ``SendMessage``
  and ``GetTask`` polls with backoff), the A2A ``messageId`` being the mesh
  ``message_id``, so a retry is the same message to a conforming server; a
  follow-up carries the remote task id recorded in ``a2a_remote_tasks``;
* ``task.status`` ``canceled`` from the initiator → ``CancelTask``;
* anything else is acked: it has no A2A counterpart.

An event is acked once the remote accepted it (its first answer), in the same
transaction that records the remote task. The rest of the answer — messages,
states, artifacts — is written back as the agent by app.a2a.writeback in a
follower task while the lane goes on with the next event; a stream that
breaks, or a task that has not settled when ``SendMessage`` answers, is
followed with ``GetTask`` polls, and after a restart every forwarded task that
has not settled is followed again (:meth:`Forwarder.resume`).

A remote that cannot be reached raises :class:`~workers.a2a_remote.RemoteDown`
(nothing acked, the lane retries); one that answers with an A2A error fails
the mesh task with the error as its reason, and the event is acked.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

import asyncpg
from a2a.client.client import Client
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    SendMessageRequest,
)
from a2a.utils.errors import A2AError

from app.a2a.writeback import WriteBack
from app.domain.event_wire import WireEvent
from app.platform.retry import Schedule
from app.platform.settings import Settings
from app.services.mesh import Mesh
from app.store import a2a_remotes as store
from app.store import agents as agents_store
from workers.a2a_remote import Remote, RemoteDown, describe, outbound, remote_ids, transient

log = logging.getLogger("mesh.a2a_bridge")


class Forwarder:
    """The forwards of one bridge process, and the followers of their answers."""

    def __init__(self, settings: Settings, pool: asyncpg.Pool, mesh: Mesh,
                 stopping: asyncio.Event) -> None:
        self.settings = settings
        self.pool = pool
        self.mesh = mesh  # what the answers are written with (app.a2a.writeback)
        self.polls = Schedule(base=settings.a2a_bridge_poll_base_seconds,
                              cap=max(settings.a2a_bridge_poll_cap_seconds,
                                      settings.a2a_bridge_poll_base_seconds))
        self._stopping = stopping
        # mesh task id → (its agent, its follower): the answers this process awaits.
        self._following: dict[str, tuple[str, asyncio.Task[None]]] = {}

    def followers(self, agent_id: str) -> set[asyncio.Task[None]]:
        return {t for owner, t in self._following.values() if owner == agent_id and not t.done()}

    async def _ack(self, agent_id: str, seq: int) -> None:
        await agents_store.ack(self.pool, agent_id, seq)

    async def forward(self, remote: Remote, event: WireEvent) -> None:
        """Forward one event; acked when this returns. RemoteDown: not acked."""
        agent_id = remote.agent.agent_id
        data: dict[str, Any] = json.loads(event.data)
        kind, payload, task_id = data.get("type"), data.get("payload") or {}, data.get("task_id")
        if kind in ("task.created", "task.message") and task_id:
            await self._send(remote, event.seq, task_id, payload["message"],
                             follow_up=kind == "task.message")
            return
        if kind == "task.status" and payload.get("state") == "canceled" and task_id:
            known = await store.remote_task(self.pool, task_id)
            if known is not None and known["remote_task_id"]:
                try:
                    async with remote.client(self.settings) as client:
                        await client.cancel_task(CancelTaskRequest(id=known["remote_task_id"]))
                except Exception as exc:
                    if transient(exc):
                        raise RemoteDown(describe(exc)) from exc
                    log.info("a2a %s: the remote did not cancel %s (%s)", agent_id, task_id,
                             describe(exc))
                await store.set_state(self.pool, task_id, "canceled")
        await self._ack(agent_id, event.seq)

    async def _send(self, remote: Remote, seq: int, task_id: str, msg: dict[str, Any], *,
                    follow_up: bool) -> None:
        agent_id = remote.agent.agent_id
        known = await store.remote_task(self.pool, task_id)
        if follow_up and (known is None or not known["remote_task_id"]):
            # The remote answered that task without one (a direct message): it is over.
            await self._ack(agent_id, seq)
            return
        if known is not None and known["sending_message_id"] == msg["message_id"]:
            # Sent before without an answer seen (a crash, a timeout): ask first.
            found = await self._probe(remote, known, msg)
            if found is not None:
                async with self.pool.acquire() as conn, conn.transaction():
                    await store.record_task(conn, task_id, agent_id, *found)
                    await agents_store.ack(conn, agent_id, seq)
                self._follow(agent_id, task_id, self._resume_one(remote, task_id, found[0]))
                return
        await store.sending(self.pool, task_id, agent_id, msg["message_id"])
        request = SendMessageRequest(message=outbound(msg, known))
        accepted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        follower = self._follow(agent_id, task_id,
                                self._exchange(remote, seq, task_id, request, accepted))
        await asyncio.wait({accepted, follower}, return_when=asyncio.FIRST_COMPLETED)
        if not accepted.done():  # the follower ended before the remote's answer
            raise RemoteDown("the forward did not finish")
        accepted.result()  # RemoteDown from the follower: not acked, retried

    async def _probe(self, remote: Remote, known: asyncpg.Record,
                     msg: dict[str, Any]) -> tuple[str, str | None] | None:
        """The remote task holding ``msg`` (by its messageId), or None when the
        remote does not have it — or cannot say (then it is sent again)."""
        message_id = msg["message_id"]
        try:
            async with remote.client(self.settings) as client:
                if known["remote_task_id"]:
                    candidates = [await client.get_task(
                        GetTaskRequest(id=known["remote_task_id"]))]
                else:
                    page = await client.list_tasks(ListTasksRequest(
                        context_id=msg["context_id"], page_size=100))
                    candidates = list(page.tasks)
        except Exception as exc:
            if transient(exc):
                raise RemoteDown(describe(exc)) from exc
            log.info("a2a %s: cannot ask the remote whether it has %s (%s); sending it again",
                     remote.agent.agent_id, message_id, describe(exc))
            return None
        for task in candidates:
            if any(m.message_id == message_id for m in task.history):
                return task.id, task.context_id or None
        return None

    def _follow(self, agent_id: str, task_id: str, work: Any) -> asyncio.Task[None]:
        old = self._following.get(task_id)
        task = asyncio.create_task(self._guarded(task_id, work, old[1] if old else None),
                                   name=f"a2a:{task_id}")
        self._following[task_id] = (agent_id, task)

        def done(t: asyncio.Task[None]) -> None:
            if task_id in self._following and self._following[task_id][1] is t:
                del self._following[task_id]

        task.add_done_callback(done)
        return task

    async def _guarded(self, task_id: str, work: Any, old: asyncio.Task[None] | None) -> None:
        try:
            if old is not None and not old.done():
                old.cancel()  # a new message to the task: its last answer is followed anew
                await asyncio.wait({old})
            await work
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a follower must not end silently
            # Still unsettled in Postgres: the next holder of the lease follows it.
            log.warning("a2a: following task %s failed (%s); it is followed again at the "
                        "next round", task_id, describe(exc))
        finally:
            work.close()  # one cancelled before it started is closed, not left unawaited

    async def _exchange(self, remote: Remote, seq: int, task_id: str,
                        request: SendMessageRequest, accepted: asyncio.Future[None]) -> None:
        me = remote.agent
        back = WriteBack(self.mesh, me, task_id)
        try:
            async with remote.client(self.settings) as client:
                stream = client.send_message(request)
                try:
                    # Bounded: a remote that takes the call and never answers must
                    # not hold the lane (the retry asks it first, see _probe).
                    async with asyncio.timeout(self.settings.webhook_timeout_seconds):
                        first = await anext(stream)
                except StopAsyncIteration:
                    first = None
                except Exception as exc:
                    if transient(exc):
                        accepted.set_exception(RemoteDown(describe(exc)))
                        return
                    await back.fail(f"the remote A2A agent refused the message: "
                                    f"{describe(exc)}")
                    await store.note_error(self.pool, me.agent_id, describe(exc))
                    await self._ack(me.agent_id, seq)
                    accepted.set_result(None)
                    return
                if first is None:
                    await back.fail("the remote A2A agent answered with nothing")
                    await self._ack(me.agent_id, seq)
                    accepted.set_result(None)
                    return
                remote_task_id, remote_context_id = remote_ids(first)
                async with self.pool.acquire() as conn, conn.transaction():
                    await store.record_task(conn, task_id, me.agent_id, remote_task_id,
                                            remote_context_id)
                    await agents_store.ack(conn, me.agent_id, seq)
                accepted.set_result(None)
                settled = await back.apply(first)
                try:
                    async for event in stream:
                        settled = await back.apply(event)
                except Exception as exc:
                    if not transient(exc):
                        await back.fail(f"the remote A2A agent failed: {describe(exc)}")
                        return
                    log.info("a2a %s: the stream of %s broke (%s); following with GetTask",
                             me.agent_id, task_id, describe(exc))
                    settled = False
                if not settled and remote_task_id:
                    await self._poll(client, back, remote_task_id)
        finally:
            if not accepted.done():
                accepted.set_exception(RemoteDown("the forward did not finish"))

    async def _poll(self, client: Client, back: WriteBack, remote_task_id: str) -> None:
        """GetTask with backoff until the task settles (the remote may be down a while)."""
        polls = 0
        while not self._stopping.is_set():
            polls += 1
            await self._pause(self.polls.delay(polls))
            try:
                task = await client.get_task(GetTaskRequest(id=remote_task_id))
            except Exception as exc:
                if transient(exc):
                    continue
                if isinstance(exc, A2AError):
                    await back.fail(f"the remote A2A agent lost task {remote_task_id}: "
                                    f"{describe(exc)}")
                    return
                raise
            if await back.snapshot(task):
                return

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._stopping.wait()

    async def resume(self, remote: Remote) -> None:
        """Follow again every forwarded task of the agent that has not settled (a
        restart, another process's lease taken over)."""
        agent_id = remote.agent.agent_id
        for task in await store.open_tasks(self.pool, agent_id):
            if task["task_id"] in self._following:
                continue
            self._follow(agent_id, task["task_id"],
                         self._resume_one(remote, task["task_id"], task["remote_task_id"]))

    async def _resume_one(self, remote: Remote, task_id: str, remote_task_id: str) -> None:
        back = WriteBack(self.mesh, remote.agent, task_id)
        async with remote.client(self.settings) as client:
            await self._poll(client, back, remote_task_id)

    async def stop(self) -> None:
        """Cancel the followers; what they did not write back is followed again
        by the next holder of the agent's lease."""
        followers = [t for _agent, t in self._following.values()]
        for task in followers:
            task.cancel()
        await asyncio.gather(*followers, return_exceptions=True)
