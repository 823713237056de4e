"""SQL of OAuth clients, grants and authorization codes (ADR 040)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import asyncpg

Conn = asyncpg.Connection | asyncpg.Pool


async def client(conn: Conn, client_id: str) -> asyncpg.Record | None:
    return await conn.fetchrow("SELECT * FROM oauth_clients WHERE client_id = $1", client_id)


async def put_client(conn: Conn, *, client_id: str, kind: str, client_name: str,
                     client_uri: str | None, redirect_uris: list[str], metadata: dict[str, Any],
                     fetched: bool) -> asyncpg.Record:
    """Insert, or refresh a metadata document's copy."""
    row = await conn.fetchrow(
        "INSERT INTO oauth_clients (client_id, kind, client_name, client_uri, redirect_uris, "
        "metadata, fetched_at) VALUES ($1, $2, $3, $4, $5, $6::jsonb, "
        "CASE WHEN $7 THEN now() END) "
        "ON CONFLICT (client_id) DO UPDATE SET client_name = EXCLUDED.client_name, "
        "client_uri = EXCLUDED.client_uri, redirect_uris = EXCLUDED.redirect_uris, "
        "metadata = EXCLUDED.metadata, fetched_at = EXCLUDED.fetched_at "
        "WHERE oauth_clients.kind = EXCLUDED.kind RETURNING *",
        client_id, kind, client_name, client_uri, redirect_uris, json.dumps(metadata), fetched)
    assert row is not None, "a client id names one kind of client"
    return row


async def add_code(conn: Conn, *, code_hash: str, client_id: str, agent_id: str, owner_id: int,
                   redirect_uri: str, code_challenge: str, resource: str, scope: str,
                   expires_at: datetime) -> None:
    # Spent and expired codes are of no use: each new one clears a few old ones.
    await conn.execute(
        "DELETE FROM oauth_codes WHERE code_hash IN (SELECT code_hash FROM oauth_codes "
        "WHERE expires_at < now() - interval '1 hour' LIMIT 100)")
    await conn.execute(
        "INSERT INTO oauth_codes (code_hash, client_id, agent_id, owner_id, redirect_uri, "
        "code_challenge, resource, scope, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        code_hash, client_id, agent_id, owner_id, redirect_uri, code_challenge, resource, scope,
        expires_at)


async def spend_code(conn: Conn, code_hash: str) -> tuple[asyncpg.Record | None, str | None]:
    """(the code, if it was live and is now spent; the grant of an earlier exchange
    of the same code, if this is a replay)."""
    row = await conn.fetchrow(
        "UPDATE oauth_codes SET used_at = now() WHERE code_hash = $1 AND used_at IS NULL "
        "AND expires_at > now() RETURNING *", code_hash)
    if row is not None:
        return row, None
    replay = await conn.fetchval(
        "SELECT grant_id FROM oauth_codes WHERE code_hash = $1 AND used_at IS NOT NULL", code_hash)
    return None, replay


async def add_grant(conn: Conn, *, grant_id: str, client_id: str, agent_id: str, owner_id: int,
                    resource: str, scope: str, refresh_hash: str, refresh_expires_at: datetime,
                    code_hash: str) -> None:
    await conn.execute(
        "INSERT INTO oauth_grants (grant_id, client_id, agent_id, owner_id, resource, scope, "
        "refresh_hash, refresh_expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        grant_id, client_id, agent_id, owner_id, resource, scope, refresh_hash, refresh_expires_at)
    await conn.execute("UPDATE oauth_codes SET grant_id = $2 WHERE code_hash = $1",
                       code_hash, grant_id)


async def rotate_refresh(conn: Conn, old_hash: str, new_hash: str,
                         expires_at: datetime) -> asyncpg.Record | None:
    """Swap a live refresh token for a new one; None when it is not live."""
    return await conn.fetchrow(
        "UPDATE oauth_grants SET previous_refresh_hash = refresh_hash, refresh_hash = $2, "
        "refresh_expires_at = $3, last_used_at = now() "
        "WHERE refresh_hash = $1 AND revoked_at IS NULL AND refresh_expires_at > now() "
        "RETURNING *", old_hash, new_hash, expires_at)


async def revoke_by_previous_refresh(conn: Conn, old_hash: str) -> bool:
    status = await conn.execute(
        "UPDATE oauth_grants SET revoked_at = now() WHERE previous_refresh_hash = $1 "
        "AND revoked_at IS NULL", old_hash)
    return status != "UPDATE 0"


async def live_grant(conn: Conn, grant_id: str, agent_id: str) -> asyncpg.Record | None:
    """The grant with its agent, if neither is gone. Marks it used, but at most once a
    minute: every /mcp call asks, and a write per call would be a row version per call."""
    return await conn.fetchrow(
        "WITH g AS (SELECT g.grant_id, g.client_id, g.resource, a.agent_id, a.owner_id, a.kind, "
        "g.last_used_at FROM oauth_grants g JOIN agents a ON a.agent_id = g.agent_id "
        "WHERE g.grant_id = $1 AND g.agent_id = $2 AND g.revoked_at IS NULL), "
        "touched AS (UPDATE oauth_grants SET last_used_at = now() WHERE grant_id = "
        "(SELECT grant_id FROM g WHERE last_used_at IS NULL "
        "OR last_used_at < now() - interval '1 minute')) "
        "SELECT grant_id, client_id, resource, agent_id, owner_id, kind FROM g",
        grant_id, agent_id)


async def is_live(conn: Conn, grant_id: str, agent_id: str) -> bool:
    return bool(await conn.fetchval(
        "SELECT 1 FROM oauth_grants WHERE grant_id = $1 AND agent_id = $2 AND revoked_at IS NULL",
        grant_id, agent_id))


async def revoke(conn: Conn, grant_id: str, owner_id: int) -> str | None:
    """Revoke one of the owner's grants; its agent_id, or None when there is none."""
    return await conn.fetchval(
        "UPDATE oauth_grants SET revoked_at = now() WHERE grant_id = $1 AND owner_id = $2 "
        "AND revoked_at IS NULL RETURNING agent_id", grant_id, owner_id)


async def revoke_grant(conn: Conn, grant_id: str) -> None:
    await conn.execute("UPDATE oauth_grants SET revoked_at = now() WHERE grant_id = $1 "
                       "AND revoked_at IS NULL", grant_id)


async def revoke_for_agent(conn: Conn, agent_id: str) -> int:
    status = await conn.execute(
        "UPDATE oauth_grants SET revoked_at = now() WHERE agent_id = $1 AND revoked_at IS NULL",
        agent_id)
    return int(status.split()[-1])


async def owner_grants(conn: Conn, owner_id: int) -> list[asyncpg.Record]:
    return await conn.fetch(
        "SELECT g.grant_id, g.client_id, c.client_name, c.kind AS client_kind, g.agent_id, "
        "g.scope, g.created_at, g.last_used_at FROM oauth_grants g "
        "JOIN oauth_clients c USING (client_id) "
        "WHERE g.owner_id = $1 AND g.revoked_at IS NULL ORDER BY g.created_at DESC LIMIT 200",
        owner_id)
