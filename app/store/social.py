"""Friendships and groups — the permission boundary."""

from __future__ import annotations

import asyncpg

from app.domain.permissions import Relationship

Conn = asyncpg.Connection | asyncpg.Pool


def pair(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a < b else (b, a)


async def relationship(conn: Conn, a: str, b: str) -> Relationship:
    return (await pair_relationships(conn, [(a, b)]))[0]


async def relationships(conn: Conn, sender: str,
                        recipients: list[str]) -> dict[str, Relationship]:
    """The facts ``can_communicate`` decides on, for one sender and many recipients
    in one query (a broadcast's)."""
    rels = await pair_relationships(conn, [(sender, r) for r in recipients])
    return dict(zip(recipients, rels, strict=True))


async def pair_relationships(conn: Conn,
                             pairs: list[tuple[str, str]]) -> list[Relationship]:
    """The facts ``can_communicate`` decides on, per (sender, recipient) pair, in
    one query and in the pairs' order (a task's one pair; the reach checks that
    meet in a web process, app.services.reach_cache)."""
    rows = await conn.fetch(
        """
        SELECT
          EXISTS (SELECT 1 FROM friendships f WHERE f.status = 'accepted' AND
                  ((f.agent_a = r.sender AND f.agent_b = r.agent_id) OR
                   (f.agent_a = r.agent_id AND f.agent_b = r.sender))) AS friends,
          EXISTS (SELECT 1 FROM group_members m1 JOIN group_members m2 USING (group_id)
                  WHERE m1.agent_id = r.sender AND m2.agent_id = r.agent_id) AS shares_group,
          coalesce((SELECT a.owner_id = s.owner_id FROM agents a, agents s
                    WHERE a.agent_id = r.agent_id AND s.agent_id = r.sender), false) AS same_owner,
          EXISTS (SELECT 1 FROM agents WHERE agent_id IN (r.sender, r.agent_id)
                  AND kind = 'virtual-user') AS either_virtual_user,
          -- One side is an owner's virtual user and one of that owner's own agents
          -- may talk to the other side (permissions.speaks_for_own_agents).
          EXISTS (SELECT 1 FROM agents h
                  JOIN agents mine ON mine.owner_id = h.owner_id AND mine.kind <> 'virtual-user'
                  CROSS JOIN LATERAL (SELECT CASE WHEN h.agent_id = r.sender THEN r.agent_id
                                                  ELSE r.sender END AS other) o
                  WHERE h.agent_id IN (r.sender, r.agent_id) AND h.kind = 'virtual-user'
                    AND mine.agent_id <> o.other
                    AND (EXISTS (SELECT 1 FROM friendships f WHERE f.status = 'accepted'
                                 AND ((f.agent_a = mine.agent_id AND f.agent_b = o.other)
                                      OR (f.agent_a = o.other AND f.agent_b = mine.agent_id)))
                         OR EXISTS (SELECT 1 FROM group_members g1
                                    JOIN group_members g2 USING (group_id)
                                    WHERE g1.agent_id = mine.agent_id
                                      AND g2.agent_id = o.other))) AS owner_agent_may,
          EXISTS (SELECT 1 FROM agents WHERE agent_id = r.agent_id) AS both_exist
        FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS r(sender, agent_id, n)
        ORDER BY r.n
        """, [s for s, _ in pairs], [r for _, r in pairs])
    return [Relationship(
        friends=r["friends"], shares_group=r["shares_group"], same_owner=r["same_owner"],
        either_virtual_user=r["either_virtual_user"], owner_agent_may=r["owner_agent_may"],
        both_exist=r["both_exist"])
        for r in rows]


# --- friendships -------------------------------------------------------------

async def get_friendship(conn: Conn, a: str, b: str) -> asyncpg.Record | None:
    x, y = pair(a, b)
    return await conn.fetchrow(
        "SELECT * FROM friendships WHERE agent_a = $1 AND agent_b = $2 FOR UPDATE", x, y)


async def create_request(conn: Conn, request_id: str, requester: str, target: str,
                         note: str) -> asyncpg.Record | None:
    x, y = pair(requester, target)
    return await conn.fetchrow(
        "INSERT INTO friendships (request_id, agent_a, agent_b, requester, note, status) "
        "VALUES ($1, $2, $3, $4, $5, 'pending') ON CONFLICT DO NOTHING RETURNING *",
        request_id, x, y, requester, note)


async def request_by_id(conn: Conn, request_id: str) -> asyncpg.Record | None:
    return await conn.fetchrow(
        "SELECT * FROM friendships WHERE request_id = $1 FOR UPDATE", request_id)


async def accept(conn: Conn, request_id: str) -> asyncpg.Record | None:
    return await conn.fetchrow(
        "UPDATE friendships SET status = 'accepted', accepted_at = now() "
        "WHERE request_id = $1 AND status = 'pending' RETURNING *", request_id)


async def delete_request(conn: Conn, request_id: str) -> bool:
    result = await conn.execute("DELETE FROM friendships WHERE request_id = $1", request_id)
    return result.endswith(" 1")


async def delete_friendship(conn: Conn, a: str, b: str) -> bool:
    x, y = pair(a, b)
    result = await conn.execute(
        "DELETE FROM friendships WHERE agent_a = $1 AND agent_b = $2 AND status = 'accepted'", x, y)
    return result.endswith(" 1")


async def friends_of(conn: Conn, agent_id: str) -> list[asyncpg.Record]:
    return await conn.fetch(
        """
        SELECT CASE WHEN f.agent_a = $1 THEN f.agent_b ELSE f.agent_a END AS agent_id,
               f.accepted_at AS since, a.display_name, a.status, a.kind
        FROM friendships f
        JOIN agents a ON a.agent_id = CASE WHEN f.agent_a = $1 THEN f.agent_b ELSE f.agent_a END
        WHERE (f.agent_a = $1 OR f.agent_b = $1) AND f.status = 'accepted'
        ORDER BY 1
        """, agent_id)


async def requests_of(conn: Conn, agent_id: str) -> list[asyncpg.Record]:
    return await conn.fetch(
        "SELECT request_id, requester, CASE WHEN agent_a = requester THEN agent_b ELSE agent_a END "
        "AS target, note, created_at FROM friendships "
        "WHERE (agent_a = $1 OR agent_b = $1) AND status = 'pending' ORDER BY created_at", agent_id)


async def same_owner_agents(conn: Conn, agent_id: str) -> list[asyncpg.Record]:
    """The other agents of this agent's owner, with both kinds: which of them are
    implicit friends is app.domain.permissions.implicitly_friends's to say."""
    return await conn.fetch(
        """
        SELECT o.agent_id, o.display_name, o.status, o.kind, me.kind AS my_kind
        FROM agents me JOIN agents o ON o.owner_id = me.owner_id AND o.agent_id <> me.agent_id
        WHERE me.agent_id = $1
        ORDER BY 1
        """, agent_id)


# --- groups ---------------------------------------------------------------------

async def create_group(conn: Conn, group_id: str, name: str, owner_id: int) -> asyncpg.Record | None:
    return await conn.fetchrow(
        "INSERT INTO groups (group_id, name, owner_id) VALUES ($1, $2, $3) "
        "ON CONFLICT DO NOTHING RETURNING *", group_id, name, owner_id)


async def get_group(conn: Conn, group_id: str) -> asyncpg.Record | None:
    return await conn.fetchrow("SELECT * FROM groups WHERE group_id = $1", group_id)


async def groups_owned(conn: Conn, owner_id: int) -> list[asyncpg.Record]:
    return await conn.fetch(
        "SELECT g.*, (SELECT count(*) FROM group_members m WHERE m.group_id = g.group_id) "
        "AS member_count FROM groups g WHERE owner_id = $1 ORDER BY group_id", owner_id)


async def delete_group(conn: Conn, group_id: str, owner_id: int) -> bool:
    result = await conn.execute(
        "DELETE FROM groups WHERE group_id = $1 AND owner_id = $2", group_id, owner_id)
    return result.endswith(" 1")


async def add_member(conn: Conn, group_id: str, agent_id: str, role: str) -> asyncpg.Record:
    row = await conn.fetchrow(
        "INSERT INTO group_members (group_id, agent_id, role) VALUES ($1, $2, $3) "
        "ON CONFLICT (group_id, agent_id) DO UPDATE SET role = EXCLUDED.role "
        "RETURNING *, (xmax = 0) AS inserted", group_id, agent_id, role)
    assert row is not None
    return row


async def remove_member(conn: Conn, group_id: str, agent_id: str) -> bool:
    result = await conn.execute(
        "DELETE FROM group_members WHERE group_id = $1 AND agent_id = $2", group_id, agent_id)
    return result.endswith(" 1")


async def is_member(conn: Conn, group_id: str, agent_id: str) -> bool:
    return bool(await conn.fetchval(
        "SELECT EXISTS (SELECT 1 FROM group_members WHERE group_id = $1 AND agent_id = $2)",
        group_id, agent_id))


async def groups_of(conn: Conn, agent_id: str) -> list[asyncpg.Record]:
    return await conn.fetch(
        "SELECT g.group_id, g.name, m.role, m.joined_at, "
        "(SELECT count(*) FROM group_members x WHERE x.group_id = g.group_id) AS member_count "
        "FROM group_members m JOIN groups g USING (group_id) WHERE m.agent_id = $1 "
        "ORDER BY g.group_id", agent_id)


async def roster(conn: Conn, group_id: str) -> list[asyncpg.Record]:
    return await conn.fetch(
        "SELECT m.agent_id, m.role, m.joined_at, a.display_name, a.description, a.status, "
        "a.last_heartbeat_at, a.kind FROM group_members m JOIN agents a USING (agent_id) "
        "WHERE m.group_id = $1 ORDER BY m.agent_id", group_id)


async def member_ids(conn: Conn, group_id: str) -> list[str]:
    rows = await conn.fetch("SELECT agent_id FROM group_members WHERE group_id = $1", group_id)
    return [r["agent_id"] for r in rows]


async def owner_friend_of(conn: Conn, owner_id: int, agent_id: str) -> bool:
    """True when some agent of ``owner_id`` is an accepted friend of ``agent_id``."""
    return bool(await conn.fetchval(
        """
        SELECT EXISTS (
          SELECT 1 FROM friendships f JOIN agents a
            ON a.agent_id = CASE WHEN f.agent_a = $2 THEN f.agent_b ELSE f.agent_a END
          WHERE (f.agent_a = $2 OR f.agent_b = $2) AND f.status = 'accepted' AND a.owner_id = $1)
        """, owner_id, agent_id))


# --- group invitations (ADR 030) ----------------------------------------------------

async def invite(conn: Conn, group_id: str, agent_id: str, role: str) -> asyncpg.Record:
    """A pending invitation (a new one, or the pending one with its role updated);
    ``inserted`` tells which."""
    row = await conn.fetchrow(
        "INSERT INTO group_invitations (group_id, agent_id, role) VALUES ($1, $2, $3) "
        "ON CONFLICT (group_id, agent_id) DO UPDATE SET role = EXCLUDED.role "
        "RETURNING *, (xmax = 0) AS inserted", group_id, agent_id, role)
    assert row is not None
    return row


async def update_role(conn: Conn, group_id: str, agent_id: str,
                      role: str) -> asyncpg.Record | None:
    """A member's new role; None when ``agent_id`` is not a member."""
    return await conn.fetchrow(
        "UPDATE group_members SET role = $3 WHERE group_id = $1 AND agent_id = $2 "
        "RETURNING *, false AS inserted", group_id, agent_id, role)


async def take_invitation(conn: Conn, group_id: str, agent_id: str) -> asyncpg.Record | None:
    """Delete the pending invitation and return it with its group's name (None:
    there is none), for an accept or a reject."""
    return await conn.fetchrow(
        "DELETE FROM group_invitations i USING groups g "
        "WHERE i.group_id = $1 AND i.agent_id = $2 AND g.group_id = i.group_id "
        "RETURNING i.*, g.name", group_id, agent_id)


async def invitations_of(conn: Conn, agent_id: str) -> list[asyncpg.Record]:
    return await conn.fetch(
        "SELECT i.*, g.name FROM group_invitations i JOIN groups g USING (group_id) "
        "WHERE i.agent_id = $1 ORDER BY i.invited_at, i.group_id", agent_id)


async def cancel_invitation(conn: Conn, group_id: str, agent_id: str) -> bool:
    result = await conn.execute(
        "DELETE FROM group_invitations WHERE group_id = $1 AND agent_id = $2", group_id, agent_id)
    return result.endswith(" 1")


async def invited_to(conn: Conn, group_id: str) -> list[asyncpg.Record]:
    """A group's pending invitations, for its owner."""
    return await conn.fetch(
        "SELECT i.*, g.name FROM group_invitations i JOIN groups g USING (group_id) "
        "WHERE i.group_id = $1 ORDER BY i.agent_id", group_id)
