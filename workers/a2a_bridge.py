"""The outbound A2A bridge: agents served by an A2A server elsewhere (ADR 041).

An agent of kind ``a2a`` has an ``a2a_remotes`` row: its card and the headers
to call it with. This process reads each such agent's inbox after its acked
cursor, in seq order, one lane per agent with the agent's lease held
(workers/lanes.py, shared with the webhook process), and forwards:

* ``task.created`` / ``task.message`` → the SDK client's ``send_message``
  (``SendStreamingMessage`` when the card says it streams, else ``SendMessage``
  and ``GetTask`` polls with backoff), the A2A ``messageId`` being the mesh
  ``message_id``, so a retry is the same message to a conforming server; a
  follow-up carries the remote task id recorded in ``a2a_remote_tasks``;
* ``task.status`` ``canceled`` from the initiator → ``CancelTask``;
* anything else is acked: it has no A2A counterpart.

An event is acked once the remote accepted it (its first answer), in the same
transaction that records the remote task. The rest of the answer — messages,
states, artifacts — is written back as the agent by app.a2a.writeback while
the lane goes on with the next event; a stream that breaks, or a task that has
not settled when ``SendMessage`` answers, is followed with ``GetTask`` polls,
and after a restart every forwarded task that has not settled is followed again.

A remote that cannot be reached is retried with backoff (the event stays
unacked, later events of the agent wait behind it) and the agent shows
``inactive`` until it answers again. A remote that answers with an A2A error
fails the mesh task with the error as its reason, and the lane goes on.

Run: ``python -m workers.a2a_bridge`` (the Procfile ``a2a-bridge`` process).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
import redis.asyncio as aioredis
from a2a.client import ClientConfig, ClientFactory
from a2a.client.client import Client
from a2a.client.errors import A2AClientError
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    SendMessageRequest,
    StreamResponse,
)
from a2a.utils.errors import A2AError
from google.protobuf.json_format import ParseDict

from app.a2a import mapping
from app.a2a.writeback import WriteBack
from app.delivery.after_commit import AfterCommit
from app.domain.event_wire import WireEvent
from app.platform import guarded_http
from app.platform.metrics import A2A_FORWARDED, A2A_UNREACHABLE
from app.platform.retry import Schedule
from app.platform.settings import Settings
from app.platform.webhook_target import TargetRefused
from app.services import a2a_remotes, remote_card
from app.services.mesh import Mesh
from app.services.principals import Agent
from app.store import a2a_remotes as store
from app.store import agents as agents_store
from app.store import inbox as inbox_store
from workers import runtime
from workers.lanes import LaneWorker

log = logging.getLogger("mesh.a2a_bridge")

BATCH = 100
READY = "a2a bridge started"


class RemoteDown(Exception):
    """The remote could not be reached (retried; nothing is acked)."""


def transient(exc: BaseException) -> bool:
    """Whether a failed call is worth retrying: the network, a timeout, a 5xx —
    not an A2A error the remote answered with."""
    if isinstance(exc, (httpx.HTTPError, OSError, TimeoutError, TargetRefused)):
        return True
    if isinstance(exc, A2AClientError):
        cause = exc.__cause__
        if isinstance(cause, httpx.HTTPStatusError):
            code = cause.response.status_code
            return code >= 500 or code in (408, 425, 429)
        return True
    return False


def describe(exc: BaseException) -> str:
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:500]


@dataclass(frozen=True)
class Remote:
    """How to call one agent's A2A server, from its lane row."""

    agent: Agent
    card: AgentCard
    headers: dict[str, str]

    @property
    def streaming(self) -> bool:
        return remote_card.streams(self.card)

    @contextlib.asynccontextmanager
    async def client(self, settings: Settings) -> AsyncIterator[Client]:
        http = guarded_http.client(allow_private=settings.webhook_allow_private,
                                   headers=self.headers,
                                   timeout=settings.webhook_timeout_seconds)
        try:
            # Without streaming, SendMessage answers at once (returnImmediately) and
            # the answer is polled: a blocking call would hold the lane for the
            # remote task's whole run.
            config = ClientConfig(streaming=self.streaming, polling=not self.streaming,
                                  httpx_client=http,
                                  supported_protocol_bindings=list(remote_card.BINDINGS))
            client = ClientFactory(config).create(self.card)
            try:
                yield client
            finally:
                with contextlib.suppress(Exception):
                    await client.close()
        finally:
            await http.aclose()


def outbound(msg: dict[str, Any], task: asyncpg.Record | None) -> Message:
    """The mesh message as the A2A message sent to the remote."""
    body: dict[str, Any] = {
        "messageId": msg["message_id"], "role": "ROLE_USER",
        "parts": [mapping.part_to_a2a(p) for p in msg["parts"]],
        "metadata": {**(msg.get("metadata") or {}), "agent-mesh.sender": msg["sender"],
                     "agent-mesh.task_id": msg["task_id"]},
    }
    if task is not None and task["remote_task_id"]:
        body["taskId"] = task["remote_task_id"]
    if task is not None and task["remote_context_id"]:
        body["contextId"] = task["remote_context_id"]
    else:  # the mesh's conversation; also how a retry finds the task (ListTasks)
        body["contextId"] = msg["context_id"]
    return ParseDict(body, Message())


def remote_ids(event: StreamResponse) -> tuple[str | None, str | None]:
    which = event.WhichOneof("payload")
    if which == "task":
        return event.task.id or None, event.task.context_id or None
    if which in ("status_update", "artifact_update"):
        inner = getattr(event, which)
        return inner.task_id or None, inner.context_id or None
    if which == "message":
        return event.message.task_id or None, event.message.context_id or None
    return None, None


class BridgeWorker(LaneWorker):
    label = "a2a-bridge"
    log = log

    def __init__(self, settings: Settings, pool: asyncpg.Pool, redis: aioredis.Redis,
                 wakeup: AfterCommit | None = None) -> None:
        super().__init__(settings, pool, store.LEASES,
                         lease_seconds=settings.a2a_bridge_lease_seconds,
                         sweep_seconds=settings.a2a_bridge_sweep_seconds,
                         retry=Schedule(base=settings.a2a_bridge_retry_base_seconds,
                                        cap=max(settings.a2a_bridge_retry_cap_seconds,
                                                settings.a2a_bridge_retry_base_seconds)))
        self.polls = Schedule(base=settings.a2a_bridge_poll_base_seconds,
                              cap=max(settings.a2a_bridge_poll_cap_seconds,
                                      settings.a2a_bridge_poll_base_seconds))
        self.wakeup = wakeup
        # What the answers are written with (app.a2a.writeback).
        self.mesh = Mesh(pool, settings, redis, wakeup=wakeup)
        # mesh task id → (its agent, its follower): the answers this process awaits.
        self._following: dict[str, tuple[str, asyncio.Task[None]]] = {}
        self.forwarded = 0

    # --- one agent's lane -----------------------------------------------------------

    def _remote(self, agent_id: str, row: asyncpg.Record) -> Remote:
        return Remote(Agent(agent_id, int(row["owner_id"]), str(row["kind"])),
                      remote_card.to_proto(row["card"]),
                      a2a_remotes.open_headers(self.settings, row["headers"]))

    async def serve(self, agent_id: str, row: asyncpg.Record) -> None:
        """Forward the agent's events; while tasks it forwarded are followed here,
        hold the lease (renewed) and take new events as they come, so the lease
        holder is the one process following them."""
        await self._resume(agent_id, row)
        current: asyncpg.Record | None = row
        while current is not None and not self.stopping:
            wait = float(current["wait_seconds"])
            if wait > 0:
                if wait > self.lease_seconds / 3 and not self._followers(agent_id):
                    self.later(agent_id, wait)  # a long retry: give the lease up
                    return
                await self.pause(agent_id, min(wait, self.lease_seconds / 3))
                current = await self.renew(agent_id)
                continue
            await self._refresh_card(agent_id, current)
            events = await inbox_store.after(self.pool, agent_id, int(current["cursor"]), BATCH)
            if not events:
                followers = self._followers(agent_id)
                if not followers:
                    return
                await self.idle(agent_id, self.lease_seconds / 3, followers)
                current = await self.renew(agent_id)
                continue
            remote = self._remote(agent_id, current)
            for event in events:
                if current is None or event.seq <= int(current["cursor"]) or self.stopping:
                    break
                current = await self._one(remote, current, event)
                if current is not None and current["failures"]:
                    break  # wait for the retry, then start again at the cursor

    def _followers(self, agent_id: str) -> set[asyncio.Task[None]]:
        return {t for owner, t in self._following.values() if owner == agent_id and not t.done()}

    async def _one(self, remote: Remote, row: asyncpg.Record,
                   event: WireEvent) -> asyncpg.Record | None:
        agent_id = remote.agent.agent_id
        try:
            await self._forward(remote, event)
        except RemoteDown as exc:
            A2A_UNREACHABLE.inc()
            failures = int(row["failures"]) + 1
            retry_in = self.retry.delay(failures)
            if failures == 1:
                log.warning("a2a %s: the remote cannot be reached (%s); retrying", agent_id, exc)
                await agents_store.set_reachable(self.pool, agent_id, False)
            return await store.failed(self.pool, agent_id, self.name, self.lease_seconds,
                                      error=str(exc), failures=failures, retry_in=retry_in)
        self.forwarded += 1
        A2A_FORWARDED.inc()
        if row["failures"] or row["status"] == "inactive":
            await agents_store.set_reachable(self.pool, agent_id, True)
        return await store.succeeded(self.pool, agent_id, self.name, self.lease_seconds)

    async def _ack(self, agent_id: str, seq: int) -> None:
        await agents_store.ack(self.pool, agent_id, seq)

    async def _forward(self, remote: Remote, event: WireEvent) -> None:
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
        while not self.stopping:
            polls += 1
            await self.pause_for(self.polls.delay(polls))
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

    async def pause_for(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._stopping.wait()

    async def _resume(self, agent_id: str, row: asyncpg.Record) -> None:
        """Follow again every forwarded task of the agent that has not settled (a
        restart, another process's lease taken over)."""
        remote = self._remote(agent_id, row)
        for task in await store.open_tasks(self.pool, agent_id):
            if task["task_id"] in self._following:
                continue
            self._follow(agent_id, task["task_id"],
                         self._resume_one(remote, task["task_id"], task["remote_task_id"]))

    async def _resume_one(self, remote: Remote, task_id: str, remote_task_id: str) -> None:
        back = WriteBack(self.mesh, remote.agent, task_id)
        async with remote.client(self.settings) as client:
            await self._poll(client, back, remote_task_id)

    async def _refresh_card(self, agent_id: str, row: asyncpg.Record) -> None:
        """Re-validate a card older than the max age with its ETag (a 304 is cheap);
        a card that cannot be fetched now keeps the one stored."""
        if float(row["card_age"]) < self.settings.a2a_bridge_card_max_age_seconds:
            return
        headers = a2a_remotes.open_headers(self.settings, row["headers"])
        try:
            async with guarded_http.client(allow_private=self.settings.webhook_allow_private,
                                           headers=headers,
                                           timeout=self.settings.webhook_timeout_seconds) as http:
                fetched = await remote_card.fetch(http, row["card_url"], etag=row["card_etag"])
        except (remote_card.CardRefused, TargetRefused, httpx.HTTPError, OSError) as exc:
            log.info("a2a %s: card not refreshed (%s)", agent_id, describe(exc))
            return
        await store.card_seen(self.pool, agent_id, fetched.card, fetched.etag)

    # --- the worker ---------------------------------------------------------------

    async def start(self) -> None:
        if self.wakeup is not None:
            await self.wakeup.start()
        await super().start()
        log.info("%s as %s", READY, self.name)

    async def stopped(self) -> None:
        followers = [t for _agent, t in self._following.values()]
        for task in followers:
            task.cancel()
        await asyncio.gather(*followers, return_exceptions=True)
        if self.wakeup is not None:
            await self.wakeup.stop()
        log.info("a2a bridge stopped: %d events forwarded", self.forwarded)


# --- the process --------------------------------------------------------------------

async def build(rt: runtime.Runtime) -> BridgeWorker:
    pool, redis = await rt.pool(), await rt.redis()
    return BridgeWorker(rt.settings, pool, redis, AfterCommit(pool, redis))


def main() -> None:
    runtime.main(build, "a2a-bridge")


if __name__ == "__main__":
    main()
