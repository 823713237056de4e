"""Tasks: create, message, transition, artifacts — each ONE Postgres transaction
that writes the task rows, the recipient's inbox event (with its next seq) and
the outbox row together (DESIGN §1, §2)."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Any

import asyncpg

from app import ids
from app.domain import task_states
from app.domain.permissions import can_communicate, is_participant, side_of
from app.errors import bad_request, conflict, forbidden, not_found
from app.metrics import DEDUP_HITS
from app.schemas import ArtifactIn, MessageIn, StatusChange, TaskCreate, dump_parts
from app.services.hashing import content_hash
from app.services.principals import Agent
from app.settings import Settings
from app.store import events as events_store
from app.store import inbox as inbox_store
from app.store import social as social_store
from app.store import tasks as tasks_store
from app.store.events import NewEvent


class Replay(Exception):
    """Leave the transaction (rolling it back) and answer with a stored record."""

    def __init__(self, result: dict[str, Any]) -> None:
        self.result = result


# --- shapes ----------------------------------------------------------------------

def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def task_json(row: asyncpg.Record) -> dict[str, Any]:
    return {
        "task_id": row["task_id"], "context_id": row["context_id"], "state": row["state"],
        "initiator": row["initiator"], "serving_agent": row["serving_agent"],
        "status_message": row["status_message"],
        "created_at": _iso(row["created_at"]), "updated_at": _iso(row["updated_at"]),
    }


def message_json(row: asyncpg.Record) -> dict[str, Any]:
    return {
        "message_id": row["message_id"], "task_id": row["task_id"],
        "context_id": row["context_id"], "role": row["role"], "sender": row["sender"],
        "recipient": row["recipient"], "parts": row["parts"], "metadata": row["metadata"],
        "created_at": _iso(row["created_at"]),
    }


def artifact_json(row: asyncpg.Record) -> dict[str, Any]:
    return {
        "artifact_id": row["artifact_id"], "task_id": row["task_id"], "name": row["name"],
        "description": row["description"], "parts": row["parts"], "metadata": row["metadata"],
        "created_by": row["created_by"], "created_at": _iso(row["created_at"]),
    }


def _role(sender: str, task: asyncpg.Record | dict[str, Any]) -> str:
    return "user" if sender == task["initiator"] else "agent"


def _other(agent_id: str, task: asyncpg.Record | dict[str, Any]) -> str:
    return task["serving_agent"] if agent_id == task["initiator"] else task["initiator"]


# --- create ------------------------------------------------------------------------

async def check_can_message(conn: asyncpg.Connection | asyncpg.Pool, sender: str,
                            recipient: str) -> None:
    if sender == recipient:
        raise bad_request("an agent cannot send a task to itself")
    rel = await social_store.relationship(conn, sender, recipient)
    if not rel.both_exist:  # the sender is authenticated, so the recipient is missing
        raise not_found(f"unknown agent '{recipient}'")
    if not can_communicate(rel):
        raise forbidden(f"'{sender}' and '{recipient}' are neither friends nor share a group; "
                        "send a friend request first (POST /v1/mesh/friends/requests)")


async def create_task(pool: asyncpg.Pool, settings: Settings, me: Agent,
                      body: TaskCreate) -> tuple[dict[str, Any], bool]:
    """Returns (task with its first message, created?). created=False is an
    idempotent retry of the same message_id with the same content."""
    msg = body.message
    message_id = msg.message_id or ids.new_message_id(me.agent_id)
    parts = dump_parts(msg.parts)
    fingerprint = content_hash(op="create", sender=me.agent_id, to=body.to_agent_id,
                               task_id=body.task_id, context_id=body.context_id,
                               parts=parts, metadata=msg.metadata)
    task_id = body.task_id or ids.new_task_id(me.agent_id)
    context_id = body.context_id or ids.new_context_id(me.agent_id)
    try:
        async with pool.acquire() as conn, conn.transaction():
            await check_can_message(conn, me.agent_id, body.to_agent_id)
            task = await tasks_store.insert_task(
                conn, task_id=task_id, context_id=context_id, initiator=me.agent_id,
                serving_agent=body.to_agent_id)
            if task is None:
                raise await _replay_or_conflict(conn, message_id, fingerprint, me.agent_id,
                                                f"task_id '{task_id}' is already taken")
            message = await tasks_store.insert_message(
                conn, message_id=message_id, task_id=task_id, context_id=context_id,
                sender=me.agent_id, recipient=body.to_agent_id, role="user", parts=parts,
                metadata=msg.metadata, content_hash=fingerprint)
            if message is None:
                raise await _replay_or_conflict(conn, message_id, fingerprint, me.agent_id)
            result = {**task_json(task), "message": message_json(message)}
            await _emit(conn, settings, NewEvent(
                agent_id=body.to_agent_id, type="task.created", task_id=task_id,
                context_id=context_id, from_agent_id=me.agent_id,
                payload={"task": task_json(task), "message": message_json(message)},
            ), message_id=message_id)
            return result, True
    except Replay as replay:
        return replay.result, False


async def _replay_or_conflict(conn: asyncpg.Connection, message_id: str, fingerprint: str,
                              sender: str, taken: str | None = None) -> Exception:
    """A unique id collided: the same request again (→ Replay) or another one (→ 409)."""
    existing = await tasks_store.get_message(conn, message_id)
    if existing is not None and existing["content_hash"] == fingerprint \
            and existing["sender"] == sender:
        DEDUP_HITS.labels(where="api").inc()
        task = await tasks_store.get(conn, existing["task_id"])
        assert task is not None
        return Replay({**task_json(task), "message": message_json(existing)})
    if existing is not None:
        return conflict(f"message_id '{message_id}' was already used for different content; "
                        "use a new message_id for a new message")
    return conflict(taken or f"message_id '{message_id}' conflicts")


async def _emit(conn: asyncpg.Connection, settings: Settings, event: NewEvent, *,
                message_id: str | None = None,
                allow_missing: bool = False) -> dict[str, Any] | None:
    """Write the recipient's inbox event (and outbox row). A recipient that was
    deleted is a 404 — or, with ``allow_missing``, no event at all (None)."""
    try:
        written = await events_store.append(conn, [event], topic=settings.bus_topic,
                                            skip_missing=allow_missing, message_id=message_id)
    except events_store.RecipientMissing:
        raise not_found(f"agent '{event.agent_id}' no longer exists; nothing can be sent "
                        "to it") from None
    return written[0] if written else None


# --- read ----------------------------------------------------------------------------

async def _task_for(conn: asyncpg.Connection | asyncpg.Pool, agent_id: str, task_id: str, *,
                    for_update: bool = False) -> asyncpg.Record:
    task = await tasks_store.get(conn, task_id, for_update=for_update)
    if task is None or not is_participant(agent_id, task["initiator"], task["serving_agent"]):
        # Same answer for "absent" and "not yours": existence is not disclosed.
        raise not_found(f"no task '{task_id}' that you take part in")
    return task


async def get_task(pool: asyncpg.Pool, me: Agent, task_id: str) -> dict[str, Any]:
    async with pool.acquire() as conn:
        task = await _task_for(conn, me.agent_id, task_id)
        messages = await tasks_store.messages(conn, task_id)
        artifacts = await tasks_store.artifacts(conn, task_id)
        receipts: dict[str, dict[int, Any]] = {}
        for recipient in {m["recipient"] for m in messages}:
            seqs = [m["inbox_seq"] for m in messages if m["recipient"] == recipient
                    and m["inbox_seq"] is not None]
            receipts[recipient] = await inbox_store.receipts(conn, recipient, seqs)
    out = task_json(task)
    out["messages"] = []
    for m in messages:
        item = message_json(m)
        item["seq"] = m["inbox_seq"]
        item["receipt"] = _receipt(receipts.get(m["recipient"], {}).get(m["inbox_seq"]))
        out["messages"].append(item)
    out["artifacts"] = [artifact_json(a) for a in artifacts]
    return out


def _receipt(row: Any) -> dict[str, Any]:
    if row is None:
        return {"status": "queued", "delivered_at": None}
    status = "acked" if row["acked"] else ("delivered" if row["delivered_at"] else "queued")
    return {"status": status, "delivered_at": _iso(row["delivered_at"])}


async def list_tasks(pool: asyncpg.Pool, me: Agent, *, state: str | None,
                     context_id: str | None, cursor: str | None,
                     limit: int) -> dict[str, Any]:
    before = decode_cursor(cursor) if cursor else None
    rows = await tasks_store.list_for_agent(pool, me.agent_id, state=state,
                                            context_id=context_id, before=before,
                                            limit=limit + 1)
    page = rows[:limit]
    next_cursor = encode_cursor(page[-1]) if len(rows) > limit else None
    return {"tasks": [task_json(r) for r in page], "next_cursor": next_cursor}


def encode_cursor(row: asyncpg.Record) -> str:
    """Opaque and URL-safe (base64url, no padding): an ISO time's '+' would turn
    into a space when a cursor is pasted into a query string unescaped."""
    raw = f"{row['created_at'].isoformat()}|{row['task_id']}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        stamp, task_id = raw.split("|", 1)
        if not ids.is_valid_id(task_id):
            raise ValueError("not a task id")
        return datetime.fromisoformat(stamp), task_id
    except (ValueError, binascii.Error) as exc:
        raise bad_request("invalid cursor; pass the next_cursor of a previous page") from exc


# --- messages ------------------------------------------------------------------------

async def append_message(pool: asyncpg.Pool, settings: Settings, me: Agent, task_id: str,
                         body: MessageIn) -> tuple[dict[str, Any], bool]:
    message_id = body.message_id or ids.new_message_id(me.agent_id)
    parts = dump_parts(body.parts)
    fingerprint = content_hash(op="message", sender=me.agent_id, task_id=task_id,
                               parts=parts, metadata=body.metadata)
    try:
        async with pool.acquire() as conn, conn.transaction():
            # The row lock orders this message against concurrent transitions, so a
            # message never lands on a task that just became terminal.
            task = await _task_for(conn, me.agent_id, task_id, for_update=True)
            existing = await tasks_store.get_message(conn, message_id)
            if existing is not None:
                raise await _replay_message_or_conflict(existing, fingerprint, me.agent_id)
            task_states.check_accepts_messages(task["state"])
            row = await _insert_message(conn, settings, me, task, message_id, parts,
                                        body.metadata, fingerprint)
            await tasks_store.touch(conn, task_id)
            return message_json(row), True
    except Replay as replay:
        return replay.result, False


async def _replay_message_or_conflict(existing: asyncpg.Record, fingerprint: str,
                                      sender: str) -> Exception:
    if existing["content_hash"] == fingerprint and existing["sender"] == sender:
        DEDUP_HITS.labels(where="api").inc()
        return Replay(message_json(existing))
    return conflict(f"message_id '{existing['message_id']}' was already used for different "
                    "content; use a new message_id for a new message")


async def _insert_message(conn: asyncpg.Connection, settings: Settings, me: Agent,
                          task: asyncpg.Record, message_id: str, parts: list[dict[str, Any]],
                          metadata: dict[str, Any] | None, fingerprint: str,
                          event_type: str = "task.message",
                          extra_payload: dict[str, Any] | None = None) -> asyncpg.Record:
    recipient = _other(me.agent_id, task)
    row = await tasks_store.insert_message(
        conn, message_id=message_id, task_id=task["task_id"], context_id=task["context_id"],
        sender=me.agent_id, recipient=recipient, role=_role(me.agent_id, task), parts=parts,
        metadata=metadata, content_hash=fingerprint)
    if row is None:  # a concurrent request with the same message_id won the insert
        existing = await tasks_store.get_message(conn, message_id)
        assert existing is not None
        raise await _replay_message_or_conflict(existing, fingerprint, me.agent_id)
    if event_type == "task.message":
        await _emit(conn, settings, NewEvent(
            agent_id=recipient, type="task.message", task_id=task["task_id"],
            context_id=task["context_id"], from_agent_id=me.agent_id,
            payload={"message": message_json(row)}), message_id=message_id)
    return row


# --- status --------------------------------------------------------------------------

async def change_status(pool: asyncpg.Pool, settings: Settings, me: Agent, task_id: str,
                        body: StatusChange) -> dict[str, Any]:
    async with pool.acquire() as conn, conn.transaction():
        task = await _task_for(conn, me.agent_id, task_id)
        side = side_of(me.agent_id, task["initiator"], task["serving_agent"])
        task_states.check_transition(task["state"], body.state, side)  # type: ignore[arg-type]
        message: dict[str, Any] | None = None
        if body.message is not None:
            parts = dump_parts(body.message.parts)
            message_id = body.message.message_id or ids.new_message_id(me.agent_id)
            fingerprint = content_hash(op="status", sender=me.agent_id, task_id=task_id,
                                       state=body.state, parts=parts,
                                       metadata=body.message.metadata)
            if await tasks_store.get_message(conn, message_id) is not None:
                raise conflict(f"message_id '{message_id}' was already used")
            row = await _insert_message(conn, settings, me, task, message_id, parts,
                                        body.message.metadata, fingerprint,
                                        event_type="task.status")
            message = message_json(row)
        updated = await tasks_store.compare_and_set_state(conn, task_id, task["state"],
                                                          body.state, message)
        if updated is None:
            current = await tasks_store.get(conn, task_id)
            raise task_states.raise_lost_race(task["state"], current["state"] if current else "?")
        # The other side may have been deleted: the task can still be closed.
        await _emit(conn, settings, NewEvent(
            agent_id=_other(me.agent_id, task), type="task.status", task_id=task_id,
            context_id=task["context_id"], from_agent_id=me.agent_id,
            payload={"state": body.state, "previous_state": task["state"],
                     "message": message, "task": task_json(updated)}), allow_missing=True,
            message_id=message["message_id"] if message is not None else None)
        return task_json(updated)


# --- artifacts -----------------------------------------------------------------------

async def add_artifact(pool: asyncpg.Pool, settings: Settings, me: Agent, task_id: str,
                       body: ArtifactIn) -> tuple[dict[str, Any], bool]:
    artifact_id = body.artifact_id or ids.new_artifact_id()
    parts = dump_parts(body.parts)
    fingerprint = content_hash(op="artifact", name=body.name, description=body.description,
                               parts=parts, metadata=body.metadata)
    async with pool.acquire() as conn, conn.transaction():
        task = await _task_for(conn, me.agent_id, task_id, for_update=True)
        if me.agent_id != task["serving_agent"]:
            raise forbidden("only the serving agent adds artifacts to a task")
        existing = await tasks_store.get_artifact(conn, task_id, artifact_id)
        if existing is not None:
            if existing["content_hash"] == fingerprint:
                DEDUP_HITS.labels(where="api").inc()
                return artifact_json(existing), False
            raise conflict(f"artifact '{artifact_id}' exists on this task with other content")
        task_states.check_accepts_messages(task["state"])
        row = await tasks_store.insert_artifact(
            conn, task_id=task_id, artifact_id=artifact_id, name=body.name,
            description=body.description, parts=parts, metadata=body.metadata,
            content_hash=fingerprint, created_by=me.agent_id)
        if row is None:
            raise conflict(f"artifact '{artifact_id}' was created concurrently; retry to read it")
        await tasks_store.touch(conn, task_id)
        await _emit(conn, settings, NewEvent(
            agent_id=task["initiator"], type="task.artifact", task_id=task_id,
            context_id=task["context_id"], from_agent_id=me.agent_id,
            payload={"artifact": artifact_json(row)}))
        return artifact_json(row), True


# --- timeout (cron) --------------------------------------------------------------------

async def time_out(conn: asyncpg.Connection, settings: Settings,
                   task: asyncpg.Record) -> dict[str, Any] | None:
    """Fail an idle task and tell both agents. None if it moved meanwhile (CAS lost),
    which makes the job safe when two cron processes run it."""
    # A system action, not a participant's move: any open state may time out.
    target = task_states.timeout_target()
    status_message = {"reason": "timeout",
                      "detail": f"no activity for {settings.task_timeout_seconds} s"}
    updated = await tasks_store.compare_and_set_state(conn, task["task_id"], task["state"],
                                                      target, status_message)
    if updated is None:
        return None
    payload = {"state": target, "previous_state": task["state"], "task": task_json(updated),
               "reason": status_message["detail"]}
    await events_store.append(conn, [
        NewEvent(agent_id=agent, type="task.timeout", task_id=task["task_id"],
                 context_id=task["context_id"], from_agent_id=None, payload=payload)
        for agent in sorted({task["initiator"], task["serving_agent"]})
    ], topic=settings.bus_topic, skip_missing=True)
    return task_json(updated)

