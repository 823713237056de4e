"""The directory: agents their owners listed, ranked by full-text search."""

from __future__ import annotations

import asyncpg

Conn = asyncpg.Connection | asyncpg.Pool

_SEARCH_SQL = """
SELECT a.agent_id, a.name, a.display_name, a.description, a.skills, a.kind, a.status,
       a.last_heartbeat_at,
       CASE WHEN q.query IS NULL THEN 0 ELSE ts_rank(a.search_doc, q.query) END AS rank
FROM agents a,
     (SELECT CASE WHEN $1::text = '' THEN NULL
                  ELSE websearch_to_tsquery('simple', $1::text) END AS query) q
WHERE a.listed
  AND (q.query IS NULL OR a.search_doc @@ q.query)
  AND ($2::text IS NULL
       OR a.skills @> jsonb_build_array(jsonb_build_object('id', $2::text))
       OR a.skills @> jsonb_build_array(jsonb_build_object('name', $2::text))
       OR a.skills @> jsonb_build_array(jsonb_build_object('tags', jsonb_build_array($2::text))))
ORDER BY rank DESC, a.agent_id
LIMIT $3 OFFSET $4
"""


async def search(conn: Conn, *, q: str, skill: str | None, limit: int,
                 offset: int) -> list[asyncpg.Record]:
    """Listed agents matching the words of ``q`` (websearch syntax: quotes, ``or``,
    ``-word``) over name, display name, skills and description, and having a skill
    whose id, name or tag is ``skill``; best match first."""
    return list(await conn.fetch(_SEARCH_SQL, q, skill, limit, offset))


async def pending_outgoing(conn: Conn, agent_id: str) -> int:
    return int(await conn.fetchval(
        "SELECT count(*) FROM friendships WHERE requester = $1 AND status = 'pending'",
        agent_id))


async def serialize_requests_of(conn: Conn, agent_id: str) -> None:
    """One friend request of an agent at a time, so a count of its pending requests
    cannot be raced past. An advisory lock, not the agent's row: crossing requests
    (a→b, b→a) then take no locks in opposite orders."""
    await conn.execute("SELECT pg_advisory_xact_lock(hashtext('friend-request:' || $1))",
                       agent_id)
