"""A context's timeline: its tasks, messages, state changes and artifacts, in order.

Entries are paged by keyset on (at, task_id, rank, key): entries written in one
transaction share its timestamp, so they are grouped by task (a broadcast's
tasks each with its first message), and ``rank`` puts a task before its first
message. A status change's message comes before the change itself, which is
stamped with ``clock_timestamp()`` (later)."""

from __future__ import annotations

from datetime import datetime

import asyncpg

from app.store.tasks import MESSAGE_COLUMNS, TASK_COLUMNS, takes_part

Conn = asyncpg.Connection | asyncpg.Pool

_ENTRIES_SQL = """
WITH visible AS (
    SELECT task_id FROM tasks WHERE context_id = $1
      AND ($2::text[] IS NULL OR initiator = ANY($2::text[]) OR serving_agent = ANY($2::text[]))
), e AS (
    SELECT t.created_at AS at, 0 AS rank, t.task_id AS key, 'task' AS kind, t.task_id
      FROM tasks t JOIN visible USING (task_id)
    UNION ALL
    SELECT m.created_at, 1, m.message_id, 'message', m.task_id
      FROM task_messages m JOIN visible USING (task_id)
    UNION ALL
    SELECT s.created_at, 2, lpad(s.id::text, 20, '0'), 'state', s.task_id
      FROM task_state_changes s JOIN visible USING (task_id)
    UNION ALL
    SELECT a.created_at, 3, a.task_id || '/' || a.artifact_id, 'artifact', a.task_id
      FROM task_artifacts a JOIN visible USING (task_id)
)
SELECT at, rank, key, kind, task_id FROM e
WHERE $3::timestamptz IS NULL
   OR (at, task_id, rank, key) > ($3::timestamptz, $4::text, $5::int, $6::text)
ORDER BY at, task_id, rank, key LIMIT $7
"""


async def entries(conn: Conn, context_id: str, agent_ids: list[str] | None,
                  after: tuple[datetime, str, int, str] | None,
                  limit: int) -> list[asyncpg.Record]:
    """Entry keys in order; ``agent_ids`` limits them to tasks one of those agents
    takes part in (None: the whole context)."""
    at, task_id, rank, key = after if after is not None else (None, None, None, None)
    return list(await conn.fetch(_ENTRIES_SQL, context_id, agent_ids, at, task_id, rank, key,
                                 limit))


async def tasks(conn: Conn, task_ids: list[str]) -> list[asyncpg.Record]:
    return list(await conn.fetch(
        f"SELECT {TASK_COLUMNS} FROM tasks WHERE task_id = ANY($1::text[])", task_ids))


async def messages(conn: Conn, message_ids: list[str]) -> list[asyncpg.Record]:
    return list(await conn.fetch(
        f"SELECT {MESSAGE_COLUMNS} FROM task_messages WHERE message_id = ANY($1::text[])",
        message_ids))


async def state_changes(conn: Conn, ids: list[int]) -> list[asyncpg.Record]:
    return list(await conn.fetch(
        "SELECT id, task_id, from_state, to_state, set_by, status_message, created_at "
        "FROM task_state_changes WHERE id = ANY($1::bigint[])", ids))


async def artifacts(conn: Conn, task_ids: list[str],
                    artifact_ids: list[str]) -> list[asyncpg.Record]:
    return list(await conn.fetch(
        "SELECT a.* FROM task_artifacts a JOIN unnest($1::text[], $2::text[]) AS x(t, i) "
        "ON a.task_id = x.t AND a.artifact_id = x.i", task_ids, artifact_ids))


async def agent_may_read(conn: Conn, context_id: str, agent_id: str) -> bool:
    """A participant of any task of the context, or a member of the group the
    context belongs to (a group broadcast's)."""
    return bool(await conn.fetchval(f"SELECT {takes_part('$1::text', '$2::text')}",
                                    context_id, agent_id))
