"""A task that exists, for its two participants: read it, and what follows its
creation — messages, transitions, artifacts, the cron's timeout. Each write is
ONE Postgres transaction that writes the task rows, the recipient's inbox event
(with its next seq) and the outbox row together. Creating a task is
app.services.task_creation."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg

from app.domain import cursors, ids, task_states
from app.domain.permissions import is_participant, side_of
from app.domain.schemas import ArtifactIn, MessageIn, StatusChange, dump_parts
from app.platform.errors import conflict, forbidden, not_found
from app.platform.settings import Settings
from app.responses import (
    ArtifactOut,
    MessageOut,
    Receipt,
    TaskDetail,
    TaskMessage,
    TaskOut,
    TaskPage,
)
from app.services import broadcasts
from app.services import runs as runs_service
from app.services.hashing import content_hash
from app.services.mesh import Mesh
from app.services.principals import Agent
from app.services.replay import Replay, message_id_reused, replayed, same_request
from app.store import inbox as inbox_store
from app.store import tasks as tasks_store
from app.store.writes import NewEvent, RecipientMissing, Writes, writes


def _role(sender: str, task: asyncpg.Record | dict[str, Any]) -> str:
    return "user" if sender == task["initiator"] else "agent"


def _other(agent_id: str, task: asyncpg.Record | dict[str, Any]) -> str:
    return task["serving_agent"] if agent_id == task["initiator"] else task["initiator"]


async def _emit(tx: Writes, event: NewEvent, *, message_id: str | None = None,
                allow_missing: bool = False) -> None:
    """Write the recipient's inbox event (and outbox row). A recipient that was
    deleted is a 404 — or, with ``allow_missing``, no event at all."""
    try:
        await tx.append([event], skip_missing=allow_missing, message_id=message_id)
    except RecipientMissing:
        raise not_found(f"agent '{event.agent_id}' no longer exists; nothing can be sent "
                        "to it") from None


# --- read ----------------------------------------------------------------------------

async def _task_for(conn: asyncpg.Connection | asyncpg.Pool, agent_id: str, task_id: str, *,
                    for_update: bool = False) -> asyncpg.Record:
    task = await tasks_store.get(conn, task_id, for_update=for_update)
    _check_participant(task, agent_id, task_id)
    assert task is not None
    return task


def _check_participant(task: asyncpg.Record | None, agent_id: str, task_id: str) -> None:
    if task is None or not is_participant(agent_id, task["initiator"], task["serving_agent"]):
        # Same answer for "absent" and "not yours": existence is not disclosed.
        raise not_found(f"no task '{task_id}' that you take part in")


async def get_task(pool: asyncpg.Pool, me: Agent, task_id: str) -> TaskDetail:
    async with pool.acquire() as conn:
        task = await _task_for(conn, me.agent_id, task_id)
        messages = await tasks_store.messages(conn, task_id)
        artifacts = await tasks_store.artifacts(conn, task_id)
        receipts: dict[str, dict[int, Any]] = {}
        for recipient in {m["recipient"] for m in messages}:
            seqs = [m["inbox_seq"] for m in messages if m["recipient"] == recipient
                    and m["inbox_seq"] is not None]
            receipts[recipient] = await inbox_store.receipts(conn, recipient, seqs)
        # What the runs of the caller's owner's agents cost on this task (ADR 046):
        # each owner sees their own agents' spend, never the other side's.
        usage = await runs_service.task_usage(conn, task_id, me.owner_id)
    return TaskDetail.of(
        task,
        messages=[TaskMessage.of(m, seq=m["inbox_seq"], receipt=_receipt(
            receipts.get(m["recipient"], {}).get(m["inbox_seq"]))) for m in messages],
        artifacts=[ArtifactOut.of(a) for a in artifacts], usage=usage)


def _receipt(row: Any) -> Receipt:
    if row is None:
        return Receipt(status="queued", delivered_at=None)
    status = "acked" if row["acked"] else ("delivered" if row["delivered_at"] else "queued")
    return Receipt(status=status, delivered_at=row["delivered_at"])


async def list_tasks(pool: asyncpg.Pool, me: Agent, *, state: str | None,
                     context_id: str | None, cursor: str | None, limit: int,
                     peer: str | None = None) -> TaskPage:
    before = decode_cursor(cursor) if cursor else None
    rows = await tasks_store.list_for_agent(pool, me.agent_id, state=state,
                                            context_id=context_id, before=before,
                                            limit=limit + 1, peer=peer)
    page = rows[:limit]
    next_cursor = encode_cursor(page[-1]) if len(rows) > limit else None
    return TaskPage(tasks=[TaskOut.of(r) for r in page], next_cursor=next_cursor)


def encode_cursor(row: asyncpg.Record | dict[str, Any]) -> str:
    return cursors.keyset(row["created_at"], row["task_id"])


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    return cursors.unkeyset(cursor)


# --- messages ------------------------------------------------------------------------

async def append_message(mesh: Mesh, me: Agent, task_id: str,
                         body: MessageIn) -> tuple[MessageOut, bool]:
    """Two round trips (ADR 028): read the task (with a retry's stored message and
    Postgres's clock), then ONE statement that locks the task, re-checks it is
    open and writes the message, its event and the task's updated_at."""
    pool = mesh.pool
    message_id = body.message_id or ids.new_message_id(me.agent_id)
    parts = dump_parts(body.parts)
    fingerprint = content_hash(op="message", sender=me.agent_id, task_id=task_id,
                               parts=parts, metadata=body.metadata)
    task, existing, now = await tasks_store.get_with_message(pool, task_id, me.agent_id,
                                                             message_id)
    _check_participant(task, me.agent_id, task_id)
    assert task is not None and now is not None
    if existing is not None:
        return replayed(_replay_message(existing, fingerprint, me.agent_id))
    task_states.check_accepts_messages(task["state"])
    recipient = _other(me.agent_id, task)
    out = MessageOut(message_id=message_id, task_id=task_id, context_id=task["context_id"],
                     role=_role(me.agent_id, task), sender=me.agent_id, recipient=recipient,
                     parts=parts, metadata=body.metadata, created_at=now)
    event = NewEvent(agent_id=recipient, type="task.message", task_id=task_id,
                     context_id=task["context_id"], from_agent_id=me.agent_id,
                     payload={"message": out.wire()})
    try:
        async with writes(pool, topic=mesh.settings.bus_topic, wakeup=mesh.wakeup,
                          one_statement=True) as tx:
            seq = await tx.add_message(event, message_id=message_id, role=out.role, parts=parts,
                                       metadata=body.metadata, content_hash=fingerprint,
                                       created_at=now)
    except asyncpg.UniqueViolationError:  # a concurrent try with this message_id won
        stored = await tasks_store.get_message(pool, me.agent_id, message_id)
        assert stored is not None
        return replayed(_replay_message(stored, fingerprint, me.agent_id))
    if seq is None:  # the task closed since it was read, or the other side is gone
        current = await tasks_store.get(pool, task_id)
        if current is not None:
            task_states.check_accepts_messages(current["state"])
        raise not_found(f"agent '{recipient}' no longer exists; nothing can be sent to it")
    return out, True


def _replay_message(existing: asyncpg.Record | dict[str, Any], fingerprint: str,
                    sender: str) -> Exception:
    if same_request(existing, fingerprint, by=sender):
        return Replay(MessageOut.of(existing))
    return message_id_reused(existing["message_id"])


async def _insert_message(tx: Writes, me: Agent, task: asyncpg.Record, message_id: str,
                          parts: list[dict[str, Any]], metadata: dict[str, Any] | None,
                          fingerprint: str) -> asyncpg.Record:
    """Store a message from ``me`` to the other side that a status change carries in
    its ``task.status`` (a plain message is :func:`append_message`'s one statement)."""
    row = await tasks_store.insert_message(
        tx.conn, message_id=message_id, task_id=task["task_id"], context_id=task["context_id"],
        sender=me.agent_id, recipient=_other(me.agent_id, task), role=_role(me.agent_id, task),
        parts=parts, metadata=metadata, content_hash=fingerprint)
    if row is None:  # a concurrent request with the same message_id won the insert
        existing = await tasks_store.get_message(tx.conn, me.agent_id, message_id)
        assert existing is not None
        raise _replay_message(existing, fingerprint, me.agent_id)
    return row


# --- status --------------------------------------------------------------------------

async def change_status(mesh: Mesh, me: Agent, task_id: str, body: StatusChange) -> TaskOut:
    """Apply a transition (compare-and-set), or answer a repeat of one that already
    took effect with the task as it is, writing nothing (see :func:`_replay_status`)."""
    message_id = fingerprint = None
    parts: list[dict[str, Any]] = []
    if body.message is not None:
        parts = dump_parts(body.message.parts)
        message_id = body.message.message_id or ids.new_message_id(me.agent_id)
        fingerprint = content_hash(op="status", sender=me.agent_id, task_id=task_id,
                                   state=body.state, parts=parts,
                                   metadata=body.message.metadata)
    try:
        async with writes(mesh.pool, topic=mesh.settings.bus_topic, wakeup=mesh.wakeup) as tx:
            # Not locked: the compare-and-set below decides races. A try that loses
            # one to an earlier try of this very change is answered as a replay.
            task = await _task_for(tx.conn, me.agent_id, task_id)
            await _replay_status(tx.conn, me, task, body.state, message_id, fingerprint)
            side = side_of(me.agent_id, task["initiator"], task["serving_agent"])
            task_states.check_transition(task["state"], body.state, side)  # type: ignore[arg-type]
            message: dict[str, Any] | None = None
            if body.message is not None:
                assert message_id is not None and fingerprint is not None
                existing = await tasks_store.get_message(tx.conn, me.agent_id, message_id)
                if same_request(existing, fingerprint, by=me.agent_id):
                    # An earlier try of this change committed since the task was read.
                    raise await _lost_race(tx.conn, me, task, body.state, message_id,
                                           fingerprint)
                if existing is not None:
                    raise message_id_reused(message_id)
                try:
                    row = await _insert_message(tx, me, task, message_id, parts,
                                                body.message.metadata, fingerprint)
                except Replay:  # a concurrent try of this change stored the message first
                    raise await _lost_race(tx.conn, me, task, body.state, message_id,
                                           fingerprint) from None
                message = MessageOut.of(row).wire()
            updated = await tasks_store.compare_and_set_state(
                tx.conn, task_id, task["state"], body.state, message, set_by=me.agent_id)
            if updated is None:
                # With a message we stored ourselves, the winner carried another
                # message_id (the same one would have collided above): not a repeat.
                raise await _lost_race(tx.conn, me, task, body.state, message_id, fingerprint,
                                       replayable=message is None)
            out = TaskOut.of(updated)
            held = await broadcasts.lock_for_task(tx, updated) \
                if task_states.is_terminal(body.state) else None
            # The other side may have been deleted: the task can still be closed.
            await _emit(tx, NewEvent(
                agent_id=_other(me.agent_id, task), type="task.status", task_id=task_id,
                context_id=task["context_id"], from_agent_id=me.agent_id,
                payload={"state": body.state, "previous_state": task["state"],
                         "message": message, "task": out.wire()}), allow_missing=True,
                message_id=message_id if message is not None else None)
            if held is not None:
                await broadcasts.settle_locked(tx, held)
            return out
    except Replay as replay:
        return replay.result  # type: ignore[return-value]


async def _lost_race(conn: asyncpg.Connection, me: Agent, task: asyncpg.Record, state: str,
                     message_id: str | None, fingerprint: str | None, *,
                     replayable: bool = True) -> Exception:
    """The task moved after it was read: a replay if the move was this very change
    (an earlier try of it committed first), else the 409 of a lost race."""
    current = await tasks_store.get(conn, task["task_id"])
    if current is not None and replayable:
        await _replay_status(conn, me, current, state, message_id, fingerprint)
    return task_states.raise_lost_race(task["state"], current["state"] if current else "?")


async def _replay_status(conn: asyncpg.Connection, me: Agent, task: asyncpg.Record, state: str,
                         message_id: str | None, fingerprint: str | None) -> None:
    """Raise :class:`Replay` when this request repeats a change that took effect: the
    task is in ``state``, put there by this caller, and a message the request
    carries is stored with this id and this content. Anything else goes on to the
    transition check (409 for a move that is not legal)."""
    if not task_states.is_repeat(task["state"], state, set_by=task["state_set_by"],
                                 caller=me.agent_id):
        return
    if message_id is not None:
        assert fingerprint is not None
        stored = await tasks_store.get_message(conn, me.agent_id, message_id)
        if stored is not None and not same_request(stored, fingerprint, by=me.agent_id):
            raise message_id_reused(message_id)
        if stored is None or stored["task_id"] != task["task_id"]:
            return
    raise Replay(TaskOut.of(task))


# --- artifacts -----------------------------------------------------------------------

async def add_artifact(mesh: Mesh, me: Agent, task_id: str,
                       body: ArtifactIn) -> tuple[ArtifactOut, bool]:
    artifact_id = body.artifact_id or ids.new_artifact_id()
    parts = dump_parts(body.parts)
    fingerprint = content_hash(op="artifact", name=body.name, description=body.description,
                               parts=parts, metadata=body.metadata)
    try:
        async with writes(mesh.pool, topic=mesh.settings.bus_topic, wakeup=mesh.wakeup) as tx:
            task = await _task_for(tx.conn, me.agent_id, task_id, for_update=True)
            if me.agent_id != task["serving_agent"]:
                raise forbidden("only the serving agent adds artifacts to a task")
            existing = await tasks_store.get_artifact(tx.conn, task_id, artifact_id)
            if existing is not None:
                if same_request(existing, fingerprint, by=me.agent_id, by_field="created_by"):
                    raise Replay(ArtifactOut.of(existing))
                raise conflict(f"artifact '{artifact_id}' exists on this task with other "
                               "content")
            task_states.check_accepts_messages(task["state"])
            row = await tasks_store.insert_artifact(
                tx.conn, task_id=task_id, artifact_id=artifact_id, name=body.name,
                description=body.description, parts=parts, metadata=body.metadata,
                content_hash=fingerprint, created_by=me.agent_id)
            if row is None:
                raise conflict(f"artifact '{artifact_id}' was created concurrently; retry to "
                               "read it")
            await tasks_store.touch(tx.conn, task_id)
            out = ArtifactOut.of(row)
            await _emit(tx, NewEvent(
                agent_id=task["initiator"], type="task.artifact", task_id=task_id,
                context_id=task["context_id"], from_agent_id=me.agent_id,
                payload={"artifact": out.wire()}))
            return out, True
    except Replay as replay:
        return replay.result, False  # type: ignore[return-value]


# --- timeout (cron) --------------------------------------------------------------------

async def time_out(tx: Writes, settings: Settings, task: asyncpg.Record) -> TaskOut | None:
    """Fail an idle task and tell both agents. None if it moved meanwhile (CAS lost),
    which makes the job safe when two cron processes run it."""
    # A system action, not a participant's move: any open state may time out.
    target = task_states.timeout_target()
    status_message = {"reason": "timeout",
                      "detail": f"no activity for {settings.task_timeout_seconds} s"}
    updated = await tasks_store.compare_and_set_state(tx.conn, task["task_id"], task["state"],
                                                      target, status_message, set_by=None)
    if updated is None:
        return None
    out = TaskOut.of(updated)
    held = await broadcasts.lock_for_task(tx, updated)
    payload = {"state": target, "previous_state": task["state"], "task": out.wire(),
               "reason": status_message["detail"]}
    await tx.append([
        NewEvent(agent_id=agent, type="task.timeout", task_id=task["task_id"],
                 context_id=task["context_id"], from_agent_id=None, payload=payload)
        for agent in sorted({task["initiator"], task["serving_agent"]})
    ], skip_missing=True)
    if held is not None:
        await broadcasts.settle_locked(tx, held)
    return out
