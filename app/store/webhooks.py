"""Agents' webhooks: registration, the delivery lease, and the breaker's state (ADR 035)."""

from __future__ import annotations

import asyncpg

Conn = asyncpg.Connection | asyncpg.Pool

# What the owner sees (GET): the registration, its health and the backlog.
_VIEW = """
SELECT w.url, w.failures, w.breaker, w.last_error, w.last_success_at, w.last_failure_at,
       w.next_attempt_at, w.created_at, w.updated_at,
       GREATEST(a.inbox_seq - GREATEST(a.acked_seq, a.inbox_floor), 0) AS pending
FROM agent_webhooks w JOIN agents a ON a.agent_id = w.agent_id
WHERE w.agent_id = $1
"""

# What a delivering process needs after each step: where to send, how to sign,
# the breaker's state and the agent's cursor (read in the same statement).
_LANE = ("w.url, w.secret, w.previous_secret, "
         "(w.previous_secret IS NOT NULL AND w.previous_secret_until > now()) AS previous_valid, "
         "w.failures, w.breaker, w.opens, "
         "GREATEST(EXTRACT(EPOCH FROM (w.next_attempt_at - now())), 0)::float8 AS wait_seconds, "
         "GREATEST(a.acked_seq, a.inbox_floor) AS cursor, a.inbox_seq, a.owner_id, a.kind, "
         "a.status")

_LEASE = "lease_until = now() + make_interval(secs => $3)"
_MINE = "a.agent_id = w.agent_id AND w.agent_id = $1 AND w.lease_owner = $2"


async def put(conn: Conn, agent_id: str, url: str, sealed_secret: str,
              grace_seconds: float) -> asyncpg.Record:
    """Register or replace; a replaced secret stays valid ``grace_seconds``.
    A new registration starts healthy: the breaker closes, retries start over."""
    return await conn.fetchrow(
        "INSERT INTO agent_webhooks (agent_id, url, secret) VALUES ($1, $2, $3) "
        "ON CONFLICT (agent_id) DO UPDATE SET url = EXCLUDED.url, secret = EXCLUDED.secret, "
        " previous_secret = agent_webhooks.secret, "
        " previous_secret_until = now() + make_interval(secs => $4), "
        " failures = 0, breaker = 'closed', opens = 0, next_attempt_at = now(), "
        " last_error = NULL, updated_at = now() "
        "RETURNING url, breaker, failures", agent_id, url, sealed_secret, grace_seconds)


async def view(conn: Conn, agent_id: str) -> asyncpg.Record | None:
    return await conn.fetchrow(_VIEW, agent_id)


async def delete(conn: Conn, agent_id: str) -> bool:
    result = await conn.execute("DELETE FROM agent_webhooks WHERE agent_id = $1", agent_id)
    return result.endswith(" 1")


async def claim(conn: Conn, agent_id: str, owner: str, lease_seconds: float
                ) -> asyncpg.Record | None:
    """Take the agent's delivery lease if nobody holds a live one (None: another
    process delivers this agent, or it has no webhook). The row lock of the UPDATE
    makes two claims at once end with one winner."""
    return await conn.fetchrow(
        f"UPDATE agent_webhooks w SET lease_owner = $2, {_LEASE} FROM agents a "
        "WHERE a.agent_id = w.agent_id AND w.agent_id = $1 "
        "AND (w.lease_until IS NULL OR w.lease_until < now() OR w.lease_owner = $2) "
        f"RETURNING {_LANE}", agent_id, owner, lease_seconds)


async def renew(conn: Conn, agent_id: str, owner: str, lease_seconds: float
                ) -> asyncpg.Record | None:
    """Extend a held lease and re-read the registration (None: lost or deleted)."""
    return await conn.fetchrow(
        f"UPDATE agent_webhooks w SET {_LEASE} FROM agents a WHERE {_MINE} RETURNING {_LANE}",
        agent_id, owner, lease_seconds)


async def succeeded(conn: Conn, agent_id: str, owner: str, lease_seconds: float
                    ) -> asyncpg.Record | None:
    """A 2xx: the breaker closes, the failure run ends; renews the lease."""
    return await conn.fetchrow(
        f"UPDATE agent_webhooks w SET {_LEASE}, failures = 0, breaker = 'closed', opens = 0, "
        "next_attempt_at = now(), last_success_at = now() "
        f"FROM agents a WHERE {_MINE} RETURNING {_LANE}", agent_id, owner, lease_seconds)


async def failed(conn: Conn, agent_id: str, owner: str, lease_seconds: float, *,
                 error: str, failures: int, breaker: str, opens: int,
                 retry_in: float) -> asyncpg.Record | None:
    """A failed attempt with the breaker state it leads to; renews the lease."""
    return await conn.fetchrow(
        f"UPDATE agent_webhooks w SET {_LEASE}, failures = $4, breaker = $5, opens = $6, "
        "next_attempt_at = now() + make_interval(secs => $7), last_error = $8, "
        f"last_failure_at = now() FROM agents a WHERE {_MINE} RETURNING {_LANE}",
        agent_id, owner, lease_seconds, failures, breaker, opens, retry_in, error)


async def release(conn: Conn, agent_id: str, owner: str) -> bool:
    """Give the lease up; True when events are waiting (committed while this
    process was finishing: it takes them on again rather than strand them)."""
    pending = await conn.fetchval(
        "UPDATE agent_webhooks w SET lease_owner = NULL, lease_until = NULL FROM agents a "
        "WHERE a.agent_id = w.agent_id AND w.agent_id = $1 AND w.lease_owner = $2 "
        "RETURNING a.inbox_seq > GREATEST(a.acked_seq, a.inbox_floor) "
        "AND w.next_attempt_at <= now()", agent_id, owner)
    return bool(pending)


async def sweep(conn: Conn, limit: int) -> list[asyncpg.Record]:
    """Every webhook agent and whether it is due now: events waiting, no retry or
    cool-down pending, and no live lease (the safety net behind the wake-ups)."""
    return await conn.fetch(
        "SELECT w.agent_id, (a.inbox_seq > GREATEST(a.acked_seq, a.inbox_floor) "
        " AND w.next_attempt_at <= now() "
        " AND (w.lease_until IS NULL OR w.lease_until < now())) AS due "
        "FROM agent_webhooks w JOIN agents a ON a.agent_id = w.agent_id "
        "ORDER BY w.agent_id LIMIT $1", limit)


async def open_breakers(conn: Conn) -> int:
    return int(await conn.fetchval(
        "SELECT count(*) FROM agent_webhooks WHERE breaker = 'open'"))
