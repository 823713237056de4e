"""Broadcasts: ask several agents the same thing, wait for enough answers.

Creating one is one transaction: the broadcast record, one task per recipient
in a shared context (each with the same first message) and every recipient's
``task.created`` event. Settling it writes the sender's single
``broadcast.completed`` in the same transaction that sets ``outcome``, under
a row lock on the broadcast, so it can happen once only:

* early, in the status-change transaction of the task that decides it
  (:func:`lock_for_task` then :func:`settle_locked`, called by
  ``app.services.tasks`` on every move to a terminal state, timeouts included);
* or at the deadline, by cron (:func:`settle_due`).

Tasks outlive their broadcast: a late answer lands on its own task as usual.
"""

from __future__ import annotations

from datetime import datetime

import asyncpg

from app.domain import broadcast_policy, ids
from app.domain.permissions import can_communicate
from app.domain.schemas import BroadcastCreate, dump_parts
from app.domain.task_states import TERMINAL
from app.platform.errors import Problem, bad_request, forbidden, not_found
from app.platform.metrics import BROADCASTS_SETTLED
from app.responses import BroadcastOut, BroadcastRecipient, MessageOut, TaskOut
from app.services.group_messages import GROUP_BATCH, batches
from app.services.hashing import content_hash
from app.services.mesh import Mesh
from app.services.principals import Agent
from app.store import broadcasts as store
from app.store import social as social_store
from app.store import teams as teams_store
from app.store.writes import NewEvent, RecipientMissing, Writes, writes


async def _audience(conn: asyncpg.Connection, me: Agent, body: BroadcastCreate) -> list[str]:
    """The recipients, in lock order; refuses up front, naming every recipient the
    sender may not message."""
    if body.group_id is not None:
        if await social_store.get_group(conn, body.group_id) is None:
            raise not_found(f"unknown group '{body.group_id}'")
        members = await teams_store.members_in_lock_order(conn, body.group_id)
        if me.agent_id not in members:
            raise forbidden(f"'{me.agent_id}' is not a member of group '{body.group_id}'; only "
                            "members may broadcast to it")
        recipients = [m for m in members if m != me.agent_id]
        if not recipients:
            raise Problem(422, f"group '{body.group_id}' has no other members to ask")
        return recipients
    assert body.to_agent_ids is not None
    if me.agent_id in body.to_agent_ids:
        raise bad_request("an agent cannot broadcast to itself; remove it from to_agent_ids")
    rels = await social_store.relationships(conn, me.agent_id, body.to_agent_ids)
    # Unknown and unreachable get one answer, in the order given (ADR 030): a
    # broadcast to guessed ids must not tell which of them exist.
    refused = [a for a in body.to_agent_ids
               if not (rels[a].both_exist and can_communicate(rels[a]))]
    if refused:
        raise Problem(403, f"'{me.agent_id}' may not message {', '.join(refused)} (unknown, "
                      "or neither friends nor sharing a group); nothing was sent",
                      agent_ids=refused)
    return await teams_store.sort_for_locking(conn, body.to_agent_ids)


async def create(mesh: Mesh, me: Agent, body: BroadcastCreate) -> BroadcastOut:
    parts = dump_parts(body.message.parts)
    metadata = body.message.metadata
    broadcast_id = ids.new_broadcast_id(me.agent_id)
    context_id = ids.new_context_id(me.agent_id)
    async with writes(mesh.pool, topic=mesh.settings.bus_topic, wakeup=mesh.wakeup) as tx:
        recipients = await _audience(tx.conn, me, body)
        need = broadcast_policy.required(body.policy, body.n, len(recipients))
        if need > len(recipients):
            raise Problem(422, f"n={need} but the broadcast has only {len(recipients)} "
                          "recipient(s)")
        record = await store.insert(tx.conn, broadcast_id=broadcast_id, sender=me.agent_id,
                                    context_id=context_id, group_id=body.group_id,
                                    policy=body.policy, n=need,
                                    timeout_seconds=body.timeout_seconds)
        task_ids = [ids.new_task_id(me.agent_id) for _ in recipients]
        message_ids = [ids.new_message_id(me.agent_id) for _ in recipients]
        tasks = await store.insert_tasks(tx.conn, broadcast_id=broadcast_id,
                                         context_id=context_id, initiator=me.agent_id,
                                         task_ids=task_ids, recipients=recipients)
        messages = await store.insert_messages(
            tx.conn, context_id=context_id, sender=me.agent_id, message_ids=message_ids,
            task_ids=task_ids, recipients=recipients, parts=parts, metadata=metadata,
            content_hash=content_hash(op="broadcast", broadcast_id=broadcast_id, parts=parts,
                                      metadata=metadata))
        task_of = {t["serving_agent"]: t for t in tasks}
        message_of = {m["recipient"]: m for m in messages}
        for chunk in batches(recipients, GROUP_BATCH):
            try:
                written = await tx.append([NewEvent(
                    agent_id=r, type="task.created", task_id=task_of[r]["task_id"],
                    context_id=context_id, from_agent_id=me.agent_id,
                    payload={"task": TaskOut.of(task_of[r]).wire(),
                             "message": MessageOut.of(message_of[r]).wire(),
                             "broadcast_id": broadcast_id}) for r in chunk])
            except RecipientMissing as exc:  # deleted while this request ran
                raise not_found(f"unknown agent(s): {', '.join(exc.args[0])}") from None
            await store.set_receipts(tx.conn, [message_of[w["agent_id"]]["message_id"]
                                               for w in written],
                                     [w["seq"] for w in written])
        return await _view(tx.conn, record)


async def get(pool: asyncpg.Pool, me: Agent, broadcast_id: str) -> BroadcastOut:
    async with pool.acquire() as conn:
        record = await store.get(conn, broadcast_id)
        if record is None or record["sender"] != me.agent_id:
            raise not_found(f"no broadcast '{broadcast_id}' sent by you")
        return await _view(conn, record)


async def _view(conn: asyncpg.Connection, record: asyncpg.Record) -> BroadcastOut:
    rows = await store.progress(conn, record["broadcast_id"])
    timed_out = record["outcome"] == "timeout"
    recipients = [BroadcastRecipient(
        agent_id=r["recipient"], task_id=r["task_id"], state=r["state"],
        last_message=None if r["m_message_id"] is None else MessageOut.model_validate(
            {k[2:]: r[k] for k in r.keys() if k.startswith("m_")}).wire(),
        timed_out=timed_out and r["state"] not in TERMINAL) for r in rows]
    return BroadcastOut.of(
        record, status=record["outcome"] or "open", task_ids=[x.task_id for x in recipients],
        completed=sum(x.state == "completed" for x in recipients), recipients=recipients)


async def _finish(tx: Writes, record: asyncpg.Record, outcome: str) -> BroadcastOut:
    settled = await store.settle(tx.conn, record["broadcast_id"], outcome)
    view = await _view(tx.conn, settled)
    await tx.append([NewEvent(
        agent_id=record["sender"], type="broadcast.completed", context_id=record["context_id"],
        from_agent_id=None, payload={"broadcast": view.wire()})], skip_missing=True)

    async def count() -> None:  # after the commit: a rolled-back settle never happened
        BROADCASTS_SETTLED.labels(outcome=outcome).inc()

    tx.after_commit(count)
    return view


async def lock_for_task(tx: Writes, task: asyncpg.Record) -> asyncpg.Record | None:
    """Before a task that reached a terminal state emits anything: lock its open
    broadcast (None: none, or settled), then both participants' inbox counters.
    Cron settles under the broadcast lock and then appends to the sender, so
    every path takes broadcast → counters in this order and none can deadlock.
    Cheap for a task of no broadcast (one indexed lookup)."""
    record = await store.lock_open_for_task(tx.conn, task["task_id"])
    if record is not None:
        await teams_store.lock_counters(tx.conn, [task["initiator"], task["serving_agent"]])
    return record


async def settle_locked(tx: Writes, record: asyncpg.Record) -> BroadcastOut | None:
    """Settle the broadcast :func:`lock_for_task` locked if its tasks now decide it."""
    rows = await store.progress(tx.conn, record["broadcast_id"])
    decided = broadcast_policy.outcome(
        record["n"], completed=sum(r["state"] == "completed" for r in rows),
        still_open=sum(r["state"] not in TERMINAL for r in rows))
    if decided is None:
        return None
    return await _finish(tx, record, decided)


async def settle_due(mesh: Mesh, broadcast_id: str, now: datetime) -> BroadcastOut | None:
    """Settle one broadcast whose deadline passed (cron). None if a completion or
    another cron process settled it first: the row lock and the re-check decide."""
    async with writes(mesh.pool, topic=mesh.settings.bus_topic, wakeup=mesh.wakeup) as tx:
        record = await store.lock_due(tx.conn, broadcast_id, now)
        if record is None:
            return None
        return await _finish(tx, record, "timeout")
