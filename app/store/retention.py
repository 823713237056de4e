"""Retention: claiming and deleting old terminal tasks and old acked inbox events
in bounded batches. Each function runs inside the caller's
transaction; rows are claimed ``FOR UPDATE SKIP LOCKED`` so two cron processes
split the work."""

from __future__ import annotations

from datetime import datetime

import asyncpg

from app.domain.task_states import TERMINAL

_TERMINAL_LIST = ", ".join(f"'{s}'" for s in sorted(TERMINAL))


async def claim_tasks(conn: asyncpg.Connection, cutoff: datetime,
                      limit: int) -> list[asyncpg.Record]:
    return list(await conn.fetch(
        f"SELECT * FROM tasks WHERE state IN ({_TERMINAL_LIST}) AND updated_at < $1 "
        f"ORDER BY updated_at, task_id LIMIT $2 FOR UPDATE SKIP LOCKED", cutoff, limit))


async def task_children(conn: asyncpg.Connection, task_ids: list[str]
                        ) -> dict[str, list[asyncpg.Record]]:
    """The rows deleted with the tasks (by cascade), for the archive."""
    out = {}
    for table, order in (("task_messages", "created_at, message_id"),
                         ("task_artifacts", "created_at, artifact_id"),
                         ("task_state_changes", "id")):
        out[table] = list(await conn.fetch(
            f"SELECT * FROM {table} WHERE task_id = ANY($1::text[]) ORDER BY task_id, {order}",
            task_ids))
    return out


async def delete_tasks(conn: asyncpg.Connection, task_ids: list[str]) -> int:
    """Delete tasks (messages, artifacts and state changes go by cascade), their
    broadcast links, and settled broadcasts left without tasks."""
    deleted = await conn.execute("DELETE FROM tasks WHERE task_id = ANY($1::text[])", task_ids)
    orphans = await conn.fetch(
        "DELETE FROM broadcast_tasks WHERE task_id = ANY($1::text[]) RETURNING broadcast_id",
        task_ids)
    await conn.execute(
        "DELETE FROM broadcasts b WHERE b.broadcast_id = ANY($1::text[]) "
        "AND b.outcome IS NOT NULL "
        "AND NOT EXISTS (SELECT 1 FROM broadcast_tasks t WHERE t.broadcast_id = b.broadcast_id)",
        list({r["broadcast_id"] for r in orphans}))
    return int(deleted.split()[-1])


async def claim_acked_events(conn: asyncpg.Connection, cutoff: datetime,
                             limit: int) -> list[asyncpg.Record]:
    """Acked events older than ``cutoff``, locked. Never an agent's newest event:
    a re-created agent_id continues its seqs after max(seq) of the old rows
    (app.store.agents.create), and only events of existing agents (whose acked
    cursor is known)."""
    return list(await conn.fetch(
        "SELECT e.* FROM inbox_events e JOIN agents a USING (agent_id) "
        "WHERE e.seq <= a.acked_seq AND e.seq < a.inbox_seq AND e.created_at < $1 "
        "ORDER BY e.agent_id, e.seq LIMIT $2 FOR UPDATE OF e SKIP LOCKED", cutoff, limit))


async def delete_events(conn: asyncpg.Connection, agent_ids: list[str], seqs: list[int]) -> int:
    """Delete the claimed events and raise each agent's inbox floor to the highest
    seq deleted, in one statement: a read never starts inside a deleted range,
    so no stream waits for a seq that is gone."""
    rows = await conn.fetch(
        """
        WITH gone AS (
            DELETE FROM inbox_events e USING unnest($1::text[], $2::bigint[]) AS x(agent_id, seq)
            WHERE e.agent_id = x.agent_id AND e.seq = x.seq
            RETURNING e.agent_id, e.seq
        ), floors AS (
            UPDATE agents a SET inbox_floor = greatest(a.inbox_floor, f.top)
            FROM (SELECT agent_id, max(seq) AS top FROM gone GROUP BY agent_id) f
            WHERE a.agent_id = f.agent_id
            RETURNING 1
        )
        SELECT count(*) AS n FROM gone
        """, agent_ids, seqs)
    return int(rows[0]["n"])


async def claim_runs(conn: asyncpg.Connection, cutoff: datetime,
                     limit: int) -> list[asyncpg.Record]:
    """Ended runs that started before ``cutoff``, locked for this batch."""
    return await conn.fetch(
        "SELECT * FROM agent_runs WHERE started_at < $1 AND ended_at IS NOT NULL "
        "ORDER BY started_at LIMIT $2 FOR UPDATE SKIP LOCKED", cutoff, limit)


async def delete_runs(conn: asyncpg.Connection, agent_ids: list[str], run_ids: list[str]) -> int:
    deleted = await conn.execute(
        "DELETE FROM agent_runs r USING unnest($1::text[], $2::text[]) AS d(agent_id, run_id) "
        "WHERE r.agent_id = d.agent_id AND r.run_id = d.run_id", agent_ids, run_ids)
    return int(deleted.split()[-1])
