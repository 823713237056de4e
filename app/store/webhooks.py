"""Agents' webhooks: registration, the delivery lease, and the breaker's state (ADR 035)."""

from __future__ import annotations

import asyncpg

from app.store.leases import AgentLeases

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
_LANE = ("r.url, r.secret, r.previous_secret, "
         "(r.previous_secret IS NOT NULL AND r.previous_secret_until > now()) AS previous_valid, "
         "r.failures, r.breaker, r.opens, "
         "GREATEST(EXTRACT(EPOCH FROM (r.next_attempt_at - now())), 0)::float8 AS wait_seconds, "
         "GREATEST(a.acked_seq, a.inbox_floor) AS cursor, a.inbox_seq, a.owner_id, a.kind, "
         "a.status")

LEASES = AgentLeases("agent_webhooks", _LANE)
_MINE = LEASES.mine
_LEASE = LEASES.renewed
claim = LEASES.claim
renew = LEASES.renew
peek = LEASES.peek
release = LEASES.release
sweep = LEASES.sweep


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


# 2xxs for the events ``first``..``last`` (one lane's run of POSTs, in seq order),
# in ONE statement (one commit, one WAL flush per run): their receipts, the agent's
# acked cursor (what POST /v1/mesh/inbox/ack does, app.store.agents.ack) and the
# breaker's success. The lane is read from the cursor update's RETURNING, not from
# the table: the statement's snapshot predates its own updates, and a cursor read
# from it would send the events again.
_DELIVERED = f"""
WITH mark AS (
    UPDATE inbox_events SET delivered_at = clock_timestamp()
    WHERE agent_id = $1 AND seq BETWEEN $4 AND $5 AND delivered_at IS NULL
    RETURNING EXTRACT(EPOCH FROM (delivered_at - created_at))::float8 AS latency
), a AS (
    UPDATE agents SET acked_seq = GREATEST(acked_seq, LEAST($5::bigint, inbox_seq))
    WHERE agent_id = $1
    RETURNING agent_id, acked_seq, inbox_seq, inbox_floor, owner_id, kind, status
)
UPDATE agent_webhooks r SET {_LEASE}, failures = 0, breaker = 'closed', opens = 0,
    next_attempt_at = now(), last_success_at = now()
FROM a WHERE {_MINE}
RETURNING {_LANE}, ARRAY(SELECT latency FROM mark) AS latencies
"""


async def delivered(conn: Conn, agent_id: str, owner: str, lease_seconds: float, first: int,
                    last: int) -> asyncpg.Record | None:
    """Events ``first``..``last`` were taken (2xxs): receipts, ack and success,
    renewing the lease. The lane as it now stands (None: the lease was lost; the
    ack stands), with ``latencies``: commit→receipt in seconds of each event this
    was the first hand-over of."""
    return await conn.fetchrow(_DELIVERED, agent_id, owner, lease_seconds, first, last)


async def failed(conn: Conn, agent_id: str, owner: str, lease_seconds: float, *,
                 error: str, failures: int, breaker: str, opens: int,
                 retry_in: float) -> asyncpg.Record | None:
    """A failed attempt with the breaker state it leads to; renews the lease."""
    return await conn.fetchrow(
        f"UPDATE agent_webhooks r SET {_LEASE}, failures = $4, breaker = $5, opens = $6, "
        "next_attempt_at = now() + make_interval(secs => $7), last_error = $8, "
        f"last_failure_at = now() FROM agents a WHERE {_MINE} RETURNING {_LANE}",
        agent_id, owner, lease_seconds, failures, breaker, opens, retry_in, error)


async def open_breakers(conn: Conn) -> int:
    return int(await conn.fetchval(
        "SELECT count(*) FROM agent_webhooks WHERE breaker = 'open'"))
