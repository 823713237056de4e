"""Broadcasts: the record, its tasks written in bulk, its progress."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg

from app.domain.task_states import INITIAL
from app.store.tasks import MESSAGE_COLUMNS, TASK_COLUMNS

Conn = asyncpg.Connection | asyncpg.Pool

BROADCAST_COLUMNS = ("broadcast_id, sender, context_id, group_id, policy, n, deadline, outcome, "
                     "completed_at, created_at")


async def insert(conn: Conn, *, broadcast_id: str, sender: str, context_id: str,
                 group_id: str | None, policy: str, n: int,
                 timeout_seconds: int) -> asyncpg.Record:
    # The deadline on the database clock, the one cron compares it with.
    return await conn.fetchrow(
        f"INSERT INTO broadcasts (broadcast_id, sender, context_id, group_id, policy, n, deadline) "
        f"VALUES ($1, $2, $3, $4, $5, $6, now() + make_interval(secs => $7)) "
        f"RETURNING {BROADCAST_COLUMNS}",
        broadcast_id, sender, context_id, group_id, policy, n, float(timeout_seconds))


async def insert_tasks(conn: Conn, *, broadcast_id: str, context_id: str, initiator: str,
                       task_ids: list[str], recipients: list[str]) -> list[asyncpg.Record]:
    """One task per recipient and its link to the broadcast, in two statements."""
    rows = await conn.fetch(
        f"INSERT INTO tasks (task_id, context_id, initiator, serving_agent, state) "
        f"SELECT t, $2, $3, r, $5 FROM unnest($1::text[], $4::text[]) AS x(t, r) "
        f"RETURNING {TASK_COLUMNS}", task_ids, context_id, initiator, recipients, INITIAL)
    await conn.execute(
        "INSERT INTO broadcast_tasks (broadcast_id, task_id, recipient) "
        "SELECT $1, t, r FROM unnest($2::text[], $3::text[]) AS x(t, r)",
        broadcast_id, task_ids, recipients)
    return list(rows)


async def insert_messages(conn: Conn, *, context_id: str, sender: str, message_ids: list[str],
                          task_ids: list[str], recipients: list[str], parts: list[dict[str, Any]],
                          metadata: dict[str, Any] | None,
                          content_hash: str) -> list[asyncpg.Record]:
    return list(await conn.fetch(
        f"INSERT INTO task_messages (message_id, task_id, context_id, sender, recipient, role, "
        f"parts, metadata, content_hash) "
        f"SELECT m, t, $2, $3, r, 'user', $5, $6, $7 "
        f"FROM unnest($1::text[], $4::text[], $8::text[]) AS x(m, t, r) "
        f"RETURNING {MESSAGE_COLUMNS}",
        message_ids, context_id, sender, task_ids, parts, metadata, content_hash, recipients))


async def set_receipts(conn: Conn, message_ids: list[str], seqs: list[int]) -> None:
    """Each first message learns its recipient's seq (as events.append does for one)."""
    await conn.execute(
        "UPDATE task_messages m SET inbox_seq = x.seq "
        "FROM unnest($1::text[], $2::bigint[]) AS x(message_id, seq) "
        "WHERE m.message_id = x.message_id", message_ids, seqs)


async def get(conn: Conn, broadcast_id: str) -> asyncpg.Record | None:
    return await conn.fetchrow(
        f"SELECT {BROADCAST_COLUMNS} FROM broadcasts WHERE broadcast_id = $1", broadcast_id)


async def lock_open_for_task(conn: Conn, task_id: str) -> asyncpg.Record | None:
    """The open broadcast ``task_id`` belongs to, row-locked: of two transactions
    completing tasks of one broadcast, the second waits here, then sees the
    first's task change (and outcome) committed. None: no broadcast, or settled."""
    return await conn.fetchrow(
        f"SELECT {', '.join('b.' + c for c in BROADCAST_COLUMNS.split(', '))} "
        f"FROM broadcasts b JOIN broadcast_tasks bt USING (broadcast_id) "
        f"WHERE bt.task_id = $1 AND b.outcome IS NULL FOR UPDATE OF b", task_id)


async def lock_due(conn: Conn, broadcast_id: str, now: datetime) -> asyncpg.Record | None:
    return await conn.fetchrow(
        f"SELECT {BROADCAST_COLUMNS} FROM broadcasts WHERE broadcast_id = $1 "
        f"AND outcome IS NULL AND deadline <= $2 FOR UPDATE", broadcast_id, now)


async def due(conn: Conn, now: datetime, limit: int) -> list[str]:
    rows = await conn.fetch(
        "SELECT broadcast_id FROM broadcasts WHERE outcome IS NULL AND deadline <= $1 "
        "ORDER BY deadline LIMIT $2", now, limit)
    return [r["broadcast_id"] for r in rows]


async def settle(conn: Conn, broadcast_id: str, outcome: str) -> asyncpg.Record:
    return await conn.fetchrow(
        f"UPDATE broadcasts SET outcome = $2, completed_at = now() WHERE broadcast_id = $1 "
        f"RETURNING {BROADCAST_COLUMNS}", broadcast_id, outcome)


async def progress(conn: Conn, broadcast_id: str) -> list[asyncpg.Record]:
    """Each recipient's task state and the last message its serving agent sent
    (prefixed ``m_``; NULLs when it sent none), in recipient order."""
    cols = ", ".join(f"m.{c} AS m_{c}" for c in MESSAGE_COLUMNS.split(", "))
    return list(await conn.fetch(
        f"SELECT bt.recipient, t.task_id, t.state, {cols} "
        f"FROM broadcast_tasks bt JOIN tasks t USING (task_id) "
        f"LEFT JOIN LATERAL (SELECT * FROM task_messages x WHERE x.task_id = t.task_id "
        f"  AND x.sender = bt.recipient ORDER BY x.created_at DESC, x.message_id DESC LIMIT 1) m "
        f"ON true WHERE bt.broadcast_id = $1 ORDER BY bt.recipient", broadcast_id))
