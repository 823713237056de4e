"""Group messaging; its permission checks are store.social.relationships."""

from __future__ import annotations

import asyncpg

Conn = asyncpg.Connection | asyncpg.Pool


async def members_in_lock_order(conn: Conn, group_id: str) -> list[str]:
    """A group's members sorted the way Postgres orders agent_ids, which is the order
    ``app.store.events.append`` locks counter rows in: batches written in this order
    lock in one global order across batches too, so they cannot deadlock."""
    rows = await conn.fetch(
        "SELECT agent_id FROM group_members WHERE group_id = $1 ORDER BY agent_id", group_id)
    return [r["agent_id"] for r in rows]


async def sort_for_locking(conn: Conn, agent_ids: list[str]) -> list[str]:
    rows = await conn.fetch("SELECT x FROM unnest($1::text[]) x ORDER BY x", agent_ids)
    return [r["x"] for r in rows]


async def lock_counters(conn: Conn, agent_ids: list[str]) -> None:
    """Take the inbox-counter row locks ``events.append`` would take, in its order,
    ahead of a transaction that appends to these agents in several statements."""
    await conn.execute("SELECT 1 FROM agents WHERE agent_id = ANY($1::text[]) "
                       "ORDER BY agent_id FOR UPDATE", agent_ids)
