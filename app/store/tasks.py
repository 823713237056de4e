"""Tasks, their messages and artifacts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from app.domain.task_states import INITIAL, OPEN
from app.platform import fastjson
from app.store import events as events_store

Conn = asyncpg.Connection | asyncpg.Pool

TASK_COLUMNS = ("task_id, context_id, initiator, serving_agent, state, status_message, "
                "state_set_by, created_at, updated_at")
# A literal, not a parameter: only then can the planner use the partial index
# tasks_open_updated_idx (whose predicate lists the same states).
_OPEN_LIST = ", ".join(f"'{state}'" for state in sorted(OPEN))
MESSAGE_COLUMNS = ("message_id, task_id, context_id, sender, recipient, role, parts, metadata, "
                   "content_hash, inbox_seq, created_at")


_MESSAGE_WRITTEN = ("message_id, task_id, context_id, sender, recipient, role, parts, metadata, "
                    "content_hash")
_MESSAGE_INSERT = f"INSERT INTO task_messages ({_MESSAGE_WRITTEN})"
# A message's columns beside a task's in one row, prefixed: both have task_id,
# context_id and created_at.
_M = "m_"
_PREFIXED_MESSAGE = ", ".join(f"m.{c} AS {_M}{c}" for c in MESSAGE_COLUMNS.split(", "))


def _split_message(row: asyncpg.Record) -> dict[str, Any] | None:
    if row[f"{_M}message_id"] is None:
        return None
    return {c: row[f"{_M}{c}"] for c in MESSAGE_COLUMNS.split(", ")}


def takes_part(context: str, agent: str) -> str:
    """SQL true when ``agent`` is inside context ``context`` (both SQL
    expressions): it takes part in one of the context's tasks, or is a member of
    the group the context belongs to (a group broadcast's). The one statement of
    who is inside a context (ADR 030): the agent timeline reads by it, and a
    create that names a context with tasks requires it."""
    return (f"(EXISTS (SELECT 1 FROM tasks p WHERE p.context_id = {context} "
            f"AND (p.initiator = {agent} OR p.serving_agent = {agent})) "
            f"OR EXISTS (SELECT 1 FROM broadcasts pb JOIN group_members pm USING (group_id) "
            f"WHERE pb.context_id = {context} AND pm.agent_id = {agent}))")


async def may_name_context(conn: Conn, context_id: str, agent_id: str) -> bool:
    """Whether a create by ``agent_id`` may name ``context_id``: the rule
    :data:`_CREATE_SQL` applies in its statement, asked alone (to tell a refused
    create from one whose recipient is gone)."""
    return bool(await conn.fetchval(
        f"SELECT NOT EXISTS (SELECT 1 FROM tasks x WHERE x.context_id = $1) "
        f"OR {takes_part('$1::text', '$2::text')}", context_id, agent_id))


# The unique constraints a create can run into (asyncpg's constraint_name).
TASK_ID_TAKEN = "tasks_pkey"
MESSAGE_ID_TAKEN = "task_messages_pkey"

_CREATE_SQL = f"""
WITH req AS (
    -- unnest WITH ORDINALITY behind a function the planner counts as one row, so
    -- the plan cache keeps one plan for every create (migration 021, ADR 051).
    SELECT * FROM task_create_rows($1::text[], $2::text[], $3::text[], $4::text[],
                                   $5::text[], $6::text[], $7::jsonb[], $8::text[],
                                   $9::timestamptz[], $10::text[], $11::text[], $12::jsonb[],
                                   $15::text[])
), allowed AS (
    -- A context with tasks is its participants' (ADR 030): a create naming it is
    -- written only for one of them; a context nobody has used yet is free.
    SELECT r.* FROM req r
    WHERE NOT EXISTS (SELECT 1 FROM tasks x WHERE x.context_id = r.context_id)
       OR {takes_part("r.context_id", "r.initiator")}
), {events_store.bump_many("SELECT serving_agent FROM allowed")},
numbered AS (
    -- Several creates for one agent in a batch take consecutive seqs, in batch order.
    SELECT r.*, b.inbox_seq - b.bumped_by
           + row_number() OVER (PARTITION BY r.serving_agent ORDER BY r.ord) AS seq
    FROM allowed r JOIN bumped b ON b.agent_id = r.serving_agent
), t AS (
    INSERT INTO tasks (task_id, context_id, initiator, serving_agent, state, created_at,
                       updated_at)
    SELECT task_id, context_id, initiator, serving_agent, $13::text, created_at, created_at
    FROM numbered
), m AS (
    INSERT INTO task_messages ({_MESSAGE_WRITTEN}, inbox_seq, created_at)
    SELECT message_id, task_id, context_id, initiator, serving_agent, 'user', parts::jsonb,
           metadata,
           content_hash, seq, created_at
    FROM numbered
), {events_store.event_tail(
    "SELECT serving_agent, seq, event_id, type, task_id, context_id, initiator, payload, "
    "traceparent FROM numbered", topic="$14::text")}
SELECT {events_store.WRITTEN} FROM ins
"""


@dataclass(frozen=True)
class NewTask:
    """A task to create with its first message (role ``user``) and ``event``, the
    serving agent's inbox event: the event's task_id, context_id, from_agent_id
    (the initiator) and agent_id (the serving agent) are the task's."""
    event: events_store.NewEvent
    message_id: str
    parts: list[dict[str, Any]]
    metadata: dict[str, Any] | None
    content_hash: str
    created_at: datetime


async def create_with_events(conn: asyncpg.Connection, tasks: Sequence[NewTask], *,
                             topic: str) -> list[asyncpg.Record | None]:
    """Tasks, their first messages, their inbox events and outbox rows: ONE
    statement, so one round trip and, outside a transaction block, one
    transaction for the lot (ADR 028). Returns each task's inbox event as written
    (:data:`app.store.events.WRITTEN`), None where
    the serving agent does not exist or the creator may not name the task's
    context (see :func:`takes_part`; that one is not written). An id that is
    taken (a task_id, or a sender's message_id) raises
    ``asyncpg.UniqueViolationError`` naming :data:`TASK_ID_TAKEN` or
    :data:`MESSAGE_ID_TAKEN`, and then nothing at all is written."""
    events = [t.event for t in tasks]
    rows = await conn.fetch(
        _CREATE_SQL, [e.task_id for e in events], [e.context_id for e in events],
        [e.from_agent_id for e in events], [e.agent_id for e in events],
        # Parts as JSON text: a list inside the array would read as one more dimension.
        [t.message_id for t in tasks], [fastjson.dumps_text(t.parts) for t in tasks],
        [t.metadata for t in tasks],
        [t.content_hash for t in tasks], [t.created_at for t in tasks],
        [e.event_id for e in events], [e.type for e in events], [e.payload for e in events],
        INITIAL, topic, [e.traceparent for e in events])
    written = {r["event_id"]: r for r in rows}
    return [written.get(e.event_id) for e in events]


_APPEND_MESSAGE_SQL = f"""
WITH t AS (
    -- Locked, as a transition locks it: a message never lands on a task that
    -- became terminal since the caller read it.
    SELECT task_id FROM tasks WHERE task_id = $2::text AND state IN ({_OPEN_LIST}) FOR UPDATE
), {events_store.bump_many("SELECT $5::text WHERE EXISTS (SELECT 1 FROM t)")},
m AS (
    INSERT INTO task_messages ({_MESSAGE_WRITTEN}, inbox_seq, created_at)
    SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::jsonb, $8::jsonb,
           $9::text, b.inbox_seq, $10::timestamptz
    FROM bumped b
    RETURNING message_id
), touched AS (
    UPDATE tasks SET updated_at = now() WHERE task_id = $2::text AND EXISTS (SELECT 1 FROM m)
), {events_store.event_tail(
    "SELECT b.agent_id, b.inbox_seq, $11::text, $12::text, $2::text, $3::text, $4::text, "
    "$13::jsonb, $15::text FROM bumped b, m", topic="$14::text")}
SELECT {events_store.WRITTEN} FROM ins
"""


async def append_message_with_event(
        conn: asyncpg.Connection, event: events_store.NewEvent, *, message_id: str, role: str,
        parts: list[dict[str, Any]], metadata: dict[str, Any] | None, content_hash: str,
        created_at: datetime, topic: str) -> asyncpg.Record | None:
    """A message on an open task (``event``'s task_id and context_id, from its
    from_agent_id to its agent_id), that inbox event and its outbox row, and the
    task's updated_at: ONE statement (ADR 028). Returns the inbox event as written
    (:data:`app.store.events.WRITTEN`); None when
    nothing was written — the task is no longer open, or the recipient no longer
    exists (the caller reads which). A (sender, message_id) that is taken raises
    ``asyncpg.UniqueViolationError`` and nothing is written."""
    return await conn.fetchrow(
        _APPEND_MESSAGE_SQL, message_id, event.task_id, event.context_id, event.from_agent_id,
        event.agent_id, role, parts, metadata, content_hash, created_at,
        event.event_id, event.type, event.payload, topic, event.traceparent)


async def get_with_message(conn: Conn, task_id: str, sender: str,
                           message_id: str) -> tuple[asyncpg.Record | None, dict[str, Any] | None,
                                                     datetime | None]:
    """The task, the message ``sender`` may already have stored under
    ``message_id`` (a retry), and Postgres's clock now — in one round trip, no lock
    (the write that follows locks and re-checks)."""
    row = await conn.fetchrow(
        f"SELECT {', '.join(f't.{c}' for c in TASK_COLUMNS.split(', '))}, {_PREFIXED_MESSAGE}, "
        f"clock_timestamp() AS now "
        f"FROM tasks t LEFT JOIN task_messages m ON m.sender = $2 AND m.message_id = $3 "
        f"WHERE t.task_id = $1", task_id, sender, message_id)
    if row is None:
        return None, None, None
    return row, _split_message(row), row["now"]


async def get(conn: Conn, task_id: str, *, for_update: bool = False) -> asyncpg.Record | None:
    lock = " FOR UPDATE" if for_update else ""
    return await conn.fetchrow(f"SELECT {TASK_COLUMNS} FROM tasks WHERE task_id = $1{lock}", task_id)


async def touch(conn: Conn, task_id: str) -> None:
    await conn.execute("UPDATE tasks SET updated_at = now() WHERE task_id = $1", task_id)


async def compare_and_set_state(conn: Conn, task_id: str, expected: str, new: str,
                                status_message: dict[str, Any] | None, *,
                                set_by: str | None) -> asyncpg.Record | None:
    """The transition itself: applied only if the state is still ``expected``.
    ``set_by`` is the agent making the move (None for a system move)."""
    row = await conn.fetchrow(
        f"UPDATE tasks SET state = $3, status_message = $4, state_set_by = $5, "
        f"updated_at = now() WHERE task_id = $1 AND state = $2 RETURNING {TASK_COLUMNS}",
        task_id, expected, new, status_message, set_by)
    if row is not None:  # the history a context timeline shows; tasks keep only the last
        await conn.execute(
            "INSERT INTO task_state_changes (task_id, context_id, from_state, to_state, set_by, "
            "status_message) VALUES ($1, $2, $3, $4, $5, $6)",
            task_id, row["context_id"], expected, new, set_by, status_message)
    return row


async def insert_message(conn: Conn, *, message_id: str, task_id: str, context_id: str,
                         sender: str, recipient: str, role: str, parts: list[dict[str, Any]],
                         metadata: dict[str, Any] | None,
                         content_hash: str) -> asyncpg.Record | None:
    """None when message_id exists already (the caller decides: retry or conflict)."""
    return await conn.fetchrow(
        f"{_MESSAGE_INSERT} VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) "
        f"ON CONFLICT (sender, message_id) DO NOTHING RETURNING {MESSAGE_COLUMNS}",
        message_id, task_id, context_id, sender, recipient, role, parts, metadata, content_hash)


async def get_message(conn: Conn, sender: str, message_id: str) -> asyncpg.Record | None:
    """Message ids are scoped to their sender (migration 008)."""
    return await conn.fetchrow(
        f"SELECT {MESSAGE_COLUMNS} FROM task_messages WHERE sender = $1 AND message_id = $2",
        sender, message_id)


async def messages(conn: Conn, task_id: str) -> list[asyncpg.Record]:
    return await conn.fetch(
        f"SELECT {MESSAGE_COLUMNS} FROM task_messages WHERE task_id = $1 "
        f"ORDER BY created_at, message_id", task_id)


async def insert_artifact(conn: Conn, *, task_id: str, artifact_id: str, name: str | None,
                          description: str | None, parts: list[dict[str, Any]],
                          metadata: dict[str, Any] | None, content_hash: str,
                          created_by: str) -> asyncpg.Record | None:
    return await conn.fetchrow(
        "INSERT INTO task_artifacts (task_id, artifact_id, name, description, parts, metadata, "
        "content_hash, created_by) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) "
        "ON CONFLICT (task_id, artifact_id) DO NOTHING RETURNING *",
        task_id, artifact_id, name, description, parts, metadata, content_hash, created_by)


async def get_artifact(conn: Conn, task_id: str, artifact_id: str) -> asyncpg.Record | None:
    return await conn.fetchrow(
        "SELECT * FROM task_artifacts WHERE task_id = $1 AND artifact_id = $2", task_id, artifact_id)


async def artifacts(conn: Conn, task_id: str) -> list[asyncpg.Record]:
    return await conn.fetch(
        "SELECT * FROM task_artifacts WHERE task_id = $1 ORDER BY created_at, artifact_id", task_id)


async def list_for_agent(conn: Conn, agent_id: str, *, state: str | None, context_id: str | None,
                         before: tuple[datetime, str] | None, limit: int,
                         peer: str | None = None) -> list[asyncpg.Record]:
    """Tasks the agent takes part in, newest first, keyset-paginated; ``peer``
    keeps those with that agent on the other side."""
    args: list[Any] = [agent_id]
    where = ["(initiator = $1 OR serving_agent = $1)"]
    if peer is not None:
        args.append(peer)
        where.append(f"(initiator = ${len(args)} OR serving_agent = ${len(args)})")
    return await _page(conn, args, where, state=state, context_id=context_id, before=before,
                       limit=limit)


async def context_messages(conn: Conn, context_id: str, agent_ids: list[str],
                           limit: int) -> list[asyncpg.Record]:
    """A context's timeline, restricted to tasks one of ``agent_ids`` takes part in."""
    return await conn.fetch(
        f"SELECT m.{MESSAGE_COLUMNS.replace(', ', ', m.')}, t.state AS task_state "
        f"FROM task_messages m JOIN tasks t USING (task_id) "
        f"WHERE m.context_id = $1 AND (t.initiator = ANY($2::text[]) OR t.serving_agent = ANY($2::text[])) "
        f"ORDER BY m.created_at, m.message_id LIMIT $3", context_id, agent_ids, limit)


async def idle_open_tasks(conn: Conn, older_than: datetime, limit: int) -> list[asyncpg.Record]:
    return await conn.fetch(
        f"SELECT {TASK_COLUMNS} FROM tasks WHERE state IN ({_OPEN_LIST}) AND updated_at < $1 "
        f"ORDER BY updated_at LIMIT $2", older_than, limit)


_STATE = "COALESCE(payload->>'state', payload->'task'->>'state')"


async def state_history(conn: Conn, task_id: str) -> list[asyncpg.Record]:
    """A task's state changes as its participants were told them, oldest first.
    A timeout tells both sides in one transaction (same created_at): kept once."""
    return await conn.fetch(
        f"SELECT DISTINCT ON (created_at, type, {_STATE}) created_at, type, from_agent_id, "
        f"{_STATE} AS state, payload->>'previous_state' AS previous_state FROM inbox_events "
        "WHERE task_id = $1 AND type IN ('task.created', 'task.status', 'task.timeout') "
        f"ORDER BY created_at, type, {_STATE}", task_id)


def _like(text: str) -> str:
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


async def search_for_agents(conn: Conn, agent_ids: list[str], text: str, *, state: str | None,
                            context_id: str | None, before: tuple[datetime, str] | None,
                            limit: int) -> list[asyncpg.Record]:
    """Tasks any of ``agent_ids`` takes part in whose ids, agents or message text
    contain ``text`` (case-insensitive), newest first, keyset-paginated like
    :func:`list_for_agent`. A scan, not an index: meant for an owner's console."""
    args: list[Any] = [agent_ids, _like(text)]
    where = ["(initiator = ANY($1) OR serving_agent = ANY($1))",
             "(task_id ILIKE $2 OR context_id ILIKE $2 OR initiator ILIKE $2 "
             "OR serving_agent ILIKE $2 OR EXISTS (SELECT 1 FROM task_messages m "
             "WHERE m.task_id = tasks.task_id AND m.parts::text ILIKE $2))"]
    return await _page(conn, args, where, state=state, context_id=context_id, before=before,
                       limit=limit)


async def _page(conn: Conn, args: list[Any], where: list[str], *, state: str | None,
                context_id: str | None, before: tuple[datetime, str] | None,
                limit: int) -> list[asyncpg.Record]:
    """The filters and keyset page every task list shares, after the caller's own
    conditions (``where``, with their ``args``)."""
    if state is not None:
        args.append(state)
        where.append(f"state = ${len(args)}")
    if context_id is not None:
        args.append(context_id)
        where.append(f"context_id = ${len(args)}")
    if before is not None:
        args.extend(before)
        where.append(f"(created_at, task_id) < (${len(args) - 1}, ${len(args)})")
    args.append(limit)
    return await conn.fetch(
        f"SELECT {TASK_COLUMNS} FROM tasks WHERE {' AND '.join(where)} "
        f"ORDER BY created_at DESC, task_id DESC LIMIT ${len(args)}", *args)
