"""API keys: only a hash is stored; revocation is checked on every request."""

from __future__ import annotations

import asyncpg

Conn = asyncpg.Connection | asyncpg.Pool


async def create(conn: Conn, key_id: str, agent_id: str, key_hash: str) -> asyncpg.Record:
    row = await conn.fetchrow(
        "INSERT INTO api_keys (key_id, agent_id, key_hash) VALUES ($1, $2, $3) "
        "RETURNING key_id, agent_id, created_at", key_id, agent_id, key_hash)
    assert row is not None
    return row


async def list_for_agent(conn: Conn, agent_id: str) -> list[asyncpg.Record]:
    return await conn.fetch(
        "SELECT key_id, created_at, revoked_at, last_used_at FROM api_keys "
        "WHERE agent_id = $1 ORDER BY created_at", agent_id)


async def revoke(conn: Conn, agent_id: str, key_id: str) -> bool:
    result = await conn.execute(
        "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, now()) "
        "WHERE key_id = $1 AND agent_id = $2", key_id, agent_id)
    return result.endswith(" 1")


async def use(conn: Conn, key_id: str, key_hash: str) -> asyncpg.Record | None:
    """The live key ``key_id`` with hash ``key_hash`` and its agent, marked used
    (at most once a minute);
    None (and nothing marked) for a wrong secret. Comparing the hash in SQL leaks
    nothing worth having: it is the SHA-256 of what the caller sent, so its
    timing tells at most how much of a digest matched, never the secret."""
    # The mark moves at most once a minute: a key used for every call (A2A's
    # X-API-Key, /mcp) would otherwise commit a row update per call, and its
    # concurrent calls would queue on that row's lock.
    return await conn.fetchrow(
        "WITH k AS (SELECT k.key_id, k.last_used_at, a.agent_id, a.owner_id, a.kind "
        "FROM api_keys k JOIN agents a ON a.agent_id = k.agent_id "
        "WHERE k.key_id = $1 AND k.key_hash = $2 AND k.revoked_at IS NULL), "
        "marked AS (UPDATE api_keys SET last_used_at = now() WHERE key_id = "
        "(SELECT key_id FROM k WHERE last_used_at IS NULL "
        "OR last_used_at < now() - interval '1 minute')) "
        "SELECT key_id, agent_id, owner_id, kind FROM k", key_id, key_hash)


async def live_agent(conn: Conn, key_id: str, agent_id: str) -> asyncpg.Record | None:
    """The agent behind a token's key, or None when the key was revoked or the
    agent deleted since the token was issued."""
    return await conn.fetchrow(
        "SELECT a.agent_id, a.owner_id, a.kind FROM api_keys k JOIN agents a USING (agent_id) "
        "WHERE k.key_id = $1 AND k.agent_id = $2 AND k.revoked_at IS NULL", key_id, agent_id)
