"""Group messaging and many-recipient permission checks (issue 11)."""

from __future__ import annotations

import asyncpg

from app.domain.permissions import Relationship

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


async def relationships(conn: Conn, sender: str,
                        recipients: list[str]) -> dict[str, Relationship]:
    """``store.social.relationship`` for many recipients in one query."""
    rows = await conn.fetch(
        """
        SELECT r.agent_id,
          EXISTS (SELECT 1 FROM friendships f WHERE f.status = 'accepted' AND
                  ((f.agent_a = $1 AND f.agent_b = r.agent_id) OR
                   (f.agent_a = r.agent_id AND f.agent_b = $1))) AS friends,
          EXISTS (SELECT 1 FROM group_members m1 JOIN group_members m2 USING (group_id)
                  WHERE m1.agent_id = $1 AND m2.agent_id = r.agent_id) AS shares_group,
          coalesce((SELECT a.owner_id = s.owner_id FROM agents a, agents s
                    WHERE a.agent_id = r.agent_id AND s.agent_id = $1), false) AS same_owner,
          EXISTS (SELECT 1 FROM agents WHERE agent_id IN ($1, r.agent_id)
                  AND kind = 'virtual-user') AS either_virtual_user,
          EXISTS (SELECT 1 FROM agents WHERE agent_id = r.agent_id) AS both_exist
        FROM unnest($2::text[]) AS r(agent_id)
        """, sender, recipients)
    return {r["agent_id"]: Relationship(
        friends=r["friends"], shares_group=r["shares_group"], same_owner=r["same_owner"],
        either_virtual_user=r["either_virtual_user"], both_exist=r["both_exist"])
        for r in rows}


async def lock_counters(conn: Conn, agent_ids: list[str]) -> None:
    """Take the inbox-counter row locks ``events.append`` would take, in its order,
    ahead of a transaction that appends to these agents in several statements."""
    await conn.execute("SELECT 1 FROM agents WHERE agent_id = ANY($1::text[]) "
                       "ORDER BY agent_id FOR UPDATE", agent_ids)
