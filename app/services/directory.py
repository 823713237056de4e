"""The directory: find listed agents by words and by skill.

Unlisted agents never appear; an owner opts an agent in with
``PATCH /v1/agents/{id} {"listed": true}``. A result is a lead, not a
relationship: talking to it still takes a friend request, and those are
limited per agent (``friend_requests_pending_max`` pending at once)."""

from __future__ import annotations

import re

import asyncpg

from app.domain import cursors
from app.responses import DirectoryEntry, DirectoryPage
from app.store import directory as store

_CURSOR = re.compile(r"o:([0-9]{1,19})")  # ASCII digits only: int() takes others
OFFSET_MAX = 2**63 - 1  # Postgres OFFSET is a bigint


async def search(pool: asyncpg.Pool, *, q: str, skill: str | None, limit: int,
                 cursor: str | None) -> DirectoryPage:
    offset = decode_cursor(cursor) if cursor else 0
    rows = await store.search(pool, q=q.strip(), skill=skill, limit=limit + 1, offset=offset)
    more, rows = len(rows) > limit, rows[:limit]
    return DirectoryPage(agents=[DirectoryEntry.of(r) for r in rows],
                         next_cursor=encode_cursor(offset + limit) if more else None)


def encode_cursor(offset: int) -> str:
    return cursors.pack(f"o:{offset}")


def decode_cursor(cursor: str) -> int:
    """The offset of a cursor this module issued: ``o:<digits>``, at most a Postgres
    bigint (anything larger would fail in the query, a 500)."""
    offset = int(cursors.unpack(cursor, _CURSOR)[1])
    if offset > OFFSET_MAX:
        raise cursors.invalid()
    return offset
