"""Publications: agents' profiles published as templates, searched and forked."""

from __future__ import annotations

from typing import Any

import asyncpg

Conn = asyncpg.Connection | asyncpg.Pool

# What a reader of a publication sees; ``author`` is the publisher's username.
# owner_id and source_agent_id are read to decide what the caller may see.
_COLUMNS = ("p.publication_id, p.seq, p.owner_id, p.source_agent_id, p.title, p.summary, "
            "p.tags, p.display_name, p.description, p.skills, p.instructions, p.fork_count, "
            "p.created_at, u.username AS author")


async def serialize_publishing_of(conn: Conn, owner_id: int) -> None:
    """One publish of an owner at a time, so the per-owner cap cannot be raced past."""
    await conn.execute("SELECT pg_advisory_xact_lock(hashtext('publications:' || $1::text))",
                       str(owner_id))


async def count_of(conn: Conn, owner_id: int) -> int:
    return int(await conn.fetchval("SELECT count(*) FROM publications WHERE owner_id = $1",
                                   owner_id))


async def create(conn: Conn, *, publication_id: str, owner_id: int, source: asyncpg.Record,
                 title: str, summary: str, tags: list[str]) -> asyncpg.Record:
    """A snapshot of ``source`` (an agents row): its display name, description,
    skills and instructions, and nothing else of it."""
    row = await conn.fetchrow(
        f"WITH p AS (INSERT INTO publications (publication_id, owner_id, source_agent_id, "
        f"  title, summary, tags, display_name, description, skills, instructions) "
        f" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING *) "
        f"SELECT {_COLUMNS} FROM p JOIN users u ON u.user_id = p.owner_id",
        publication_id, owner_id, source["agent_id"], title, summary, tags,
        source["display_name"], source["description"], source["skills"],
        source["instructions"])
    assert row is not None
    return row


async def get(conn: Conn, publication_id: str) -> asyncpg.Record | None:
    return await conn.fetchrow(
        f"SELECT {_COLUMNS} FROM publications p JOIN users u ON u.user_id = p.owner_id "
        f"WHERE p.publication_id = $1", publication_id)


async def count_fork(conn: Conn, publication_id: str) -> asyncpg.Record | None:
    """One more fork; the row (locked until commit, so it cannot be deleted
    under the fork), or None when there is no such publication."""
    return await conn.fetchrow(
        f"WITH p AS (UPDATE publications SET fork_count = fork_count + 1 "
        f" WHERE publication_id = $1 RETURNING *) "
        f"SELECT {_COLUMNS} FROM p JOIN users u ON u.user_id = p.owner_id", publication_id)


async def delete(conn: Conn, publication_id: str, owner_id: int) -> bool:
    result = await conn.execute(
        "DELETE FROM publications WHERE publication_id = $1 AND owner_id = $2",
        publication_id, owner_id)
    return result.endswith(" 1")


# Best match first (rank), then newest (seq); without words every rank is 0, so
# newest first. The keyset (rank, seq) after the previous page's last row: rows
# published meanwhile land before the cursor, never twice or in between.
_SEARCH_SQL = f"""
SELECT * FROM (
  SELECT {_COLUMNS},
         CASE WHEN q.query IS NULL THEN 0::float8
              ELSE ts_rank(p.search_doc, q.query)::float8 END AS rank
  FROM publications p JOIN users u ON u.user_id = p.owner_id,
       (SELECT CASE WHEN $1::text = '' THEN NULL
                    ELSE websearch_to_tsquery('simple', $1::text) END AS query) q
  WHERE (q.query IS NULL OR p.search_doc @@ q.query)
    AND ($2::text IS NULL OR p.tags @> ARRAY[$2::text])
) found
WHERE $3::float8 IS NULL OR (rank, seq) < ($3::float8, $4::bigint)
ORDER BY rank DESC, seq DESC
LIMIT $5
"""


async def search(conn: Conn, *, q: str, tag: str | None, after: tuple[float, int] | None,
                 limit: int) -> list[asyncpg.Record]:
    """Publications matching the words of ``q`` (websearch syntax) over title,
    tags and summary, and tagged ``tag``; ``after`` is the (rank, seq) of the
    previous page's last row."""
    rank, seq = after if after is not None else (None, None)
    return list(await conn.fetch(_SEARCH_SQL, q, tag, rank, seq, limit))


def snapshot(row: asyncpg.Record) -> dict[str, Any]:
    """The agent fields a fork takes from a publication."""
    return {k: row[k] for k in ("display_name", "description", "skills", "instructions")}
