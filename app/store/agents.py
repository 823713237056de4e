"""Agents: profile, presence, inbox counters."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg

Conn = asyncpg.Connection | asyncpg.Pool

COLUMNS = ("agent_id, owner_id, name, display_name, description, skills, kind, status, "
           "last_heartbeat_at, inbox_seq, acked_seq, created_at, updated_at, instructions, listed, "
           "forked_from, daily_budget_usd::float8 AS daily_budget_usd")


async def create(conn: Conn, *, agent_id: str, owner_id: int, name: str, display_name: str,
                 description: str, skills: list[dict[str, Any]], kind: str = "normal",
                 instructions: str = "", forked_from: str | None = None
                 ) -> asyncpg.Record | None:
    # An agent_id may be reused after its agent was deleted. Its seq numbers must
    # never be: the old inbox rows keep their (agent_id, seq) keys, and every
    # consumer (push fan-out, SSE Last-Event-ID, meshd's persisted cursor) skips a
    # seq it has seen. So a new agent starts its counters where the last one with
    # this id stopped, and its inbox_floor there too: reads never reach below it,
    # so the predecessor's events stay out of reach even with after=0.
    return await conn.fetchrow(
        f"INSERT INTO agents (agent_id, owner_id, name, display_name, description, skills, kind, "
        f"instructions, forked_from, inbox_seq, acked_seq, inbox_floor) "
        f"SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, s.top, s.top, s.top FROM "
        f"(SELECT COALESCE(max(seq), 0) AS top FROM inbox_events WHERE agent_id = $1) s "
        f"ON CONFLICT (agent_id) DO NOTHING RETURNING {COLUMNS}",
        agent_id, owner_id, name, display_name, description, skills, kind, instructions,
        forked_from,
    )


async def get(conn: Conn, agent_id: str) -> asyncpg.Record | None:
    return await conn.fetchrow(f"SELECT {COLUMNS} FROM agents WHERE agent_id = $1", agent_id)


async def get_owned(conn: Conn, agent_id: str, owner_id: int) -> asyncpg.Record | None:
    return await conn.fetchrow(
        f"SELECT {COLUMNS} FROM agents WHERE agent_id = $1 AND owner_id = $2", agent_id, owner_id)


async def list_owned(conn: Conn, owner_id: int) -> list[asyncpg.Record]:
    return await conn.fetch(
        f"SELECT {COLUMNS} FROM agents WHERE owner_id = $1 ORDER BY kind DESC, agent_id", owner_id)


async def patch(conn: Conn, agent_id: str, owner_id: int, changes: dict[str, Any]) -> asyncpg.Record | None:
    allowed = {"display_name", "description", "skills", "instructions", "listed",
               "daily_budget_usd"}
    sets, args = [], [agent_id, owner_id]
    for column, value in changes.items():
        assert column in allowed
        args.append(value)
        sets.append(f"{column} = ${len(args)}")
    sets.append("updated_at = now()")
    return await conn.fetchrow(
        f"UPDATE agents SET {', '.join(sets)} WHERE agent_id = $1 AND owner_id = $2 RETURNING {COLUMNS}",
        *args,
    )


async def delete(conn: Conn, agent_id: str, owner_id: int) -> bool:
    result = await conn.execute(
        "DELETE FROM agents WHERE agent_id = $1 AND owner_id = $2 AND kind <> 'virtual-user'",
        agent_id, owner_id)
    return result.endswith(" 1")


async def heartbeat(conn: Conn, agent_id: str) -> asyncpg.Record | None:
    # A draining agent stays draining: only its own DELETE /online → heartbeat
    # cycle is not a way back; it must come back explicitly (see docs/api.md).
    return await conn.fetchrow(
        "UPDATE agents SET last_heartbeat_at = now(), "
        "status = CASE WHEN status = 'draining' THEN 'draining' ELSE 'active' END "
        "WHERE agent_id = $1 RETURNING status, last_heartbeat_at", agent_id)


async def set_draining(conn: Conn, agent_id: str) -> asyncpg.Record | None:
    return await conn.fetchrow(
        "UPDATE agents SET status = 'draining' WHERE agent_id = $1 "
        "RETURNING status, last_heartbeat_at", agent_id)


async def set_inactive(conn: Conn, agent_id: str) -> asyncpg.Record | None:
    """A clean stop after draining: the agent is gone (offline) until it comes back."""
    return await conn.fetchrow(
        "UPDATE agents SET status = 'inactive' WHERE agent_id = $1 "
        "RETURNING status, last_heartbeat_at", agent_id)


async def set_active(conn: Conn, agent_id: str) -> asyncpg.Record | None:
    return await conn.fetchrow(
        "UPDATE agents SET status = 'active', last_heartbeat_at = now() WHERE agent_id = $1 "
        "RETURNING status, last_heartbeat_at", agent_id)


async def ack(conn: Conn, agent_id: str, seq: int) -> asyncpg.Record | None:
    """Move the acked cursor forward only; never past inbox_seq, never back."""
    return await conn.fetchrow(
        "UPDATE agents SET acked_seq = GREATEST(acked_seq, LEAST($2::bigint, inbox_seq)) "
        "WHERE agent_id = $1 RETURNING acked_seq, inbox_seq", agent_id, seq)


# A runtime claims the event it is about to handle (ADR 050). It gets it when it
# holds it already (a retry after a restart, a renewal during a long run), or when
# nobody took it yet: past the acked cursor, and no other runtime's live claim on
# an event still unacked. A remote MCP client's take (app.store.inbox.claim) ends
# a lapsed claim, so a runtime back from a long absence does not handle twice
# what that client took.
_CLAIM_EVENT = """
UPDATE agents SET claim_owner = $3,
    claim_seq = GREATEST(CASE WHEN claim_owner = $3 THEN claim_seq ELSE 0 END,
                         LEAST($2 + $5 - 1, inbox_seq)),
    claim_until = now() + make_interval(secs => $4)
WHERE agent_id = $1 AND $2 <= inbox_seq AND (
    (claim_owner = $3 AND claim_seq >= $2)
    OR (GREATEST(acked_seq, inbox_floor) < $2
        AND (claim_owner IS NULL OR claim_owner = $3 OR claim_until <= now()
             OR claim_seq <= acked_seq)))
RETURNING claim_seq
"""


async def claim_event(conn: Conn, agent_id: str, seq: int, consumer: str,
                      seconds: float, ahead: int = 1) -> int | None:
    """Claim (or renew the claim on) event ``seq`` and the ``ahead - 1`` after it (as
    far as the inbox goes) for the runtime ``consumer`` for ``seconds``: the last seq
    the claim covers, or None when another reader took ``seq`` or another runtime
    holds a claim."""
    row = await conn.fetchrow(_CLAIM_EVENT, agent_id, seq, consumer, seconds, ahead)
    return None if row is None else int(row["claim_seq"])


async def set_reachable(conn: Conn, agent_id: str, reachable: bool) -> None:
    """Presence from outbound delivery: a webhook's 2xx (ADR 035) or an A2A
    remote's answer (ADR 041) makes the agent ``active``, an opened breaker or an
    unreachable remote ``inactive``. A draining agent stays draining."""
    if reachable:
        await conn.execute(
            "UPDATE agents SET status = 'active', last_heartbeat_at = now() "
            "WHERE agent_id = $1 AND status = 'inactive'", agent_id)
    else:
        await conn.execute(
            "UPDATE agents SET status = 'inactive' WHERE agent_id = $1 AND status = 'active'",
            agent_id)


# --- cron: presence expiry and consumer lag ------------------------------------------

async def expire_heartbeats(conn: Conn, cutoff: datetime, limit: int) -> list[str]:
    """One bounded batch: active agents whose last heartbeat is older than ``cutoff``
    become ``inactive``. Draining agents are left alone, and so are agents whose
    webhook's breaker is closed (ADR 035) or whose A2A remote answers (ADR 041):
    they are reachable without a heartbeat.
    A row another transaction holds (a heartbeat in flight) is skipped; the
    condition is re-checked under the row lock, so an agent that just heartbeated
    is never expired."""
    rows = await conn.fetch(
        "UPDATE agents SET status = 'inactive' WHERE agent_id IN ("
        " SELECT agent_id FROM agents WHERE status = 'active' AND last_heartbeat_at < $1"
        " AND NOT EXISTS (SELECT 1 FROM agent_webhooks w"
        "                 WHERE w.agent_id = agents.agent_id AND w.breaker = 'closed')"
        " AND NOT EXISTS (SELECT 1 FROM a2a_remotes r"
        "                 WHERE r.agent_id = agents.agent_id AND r.failures = 0)"
        " ORDER BY last_heartbeat_at LIMIT $2 FOR UPDATE SKIP LOCKED)"
        " AND status = 'active' AND last_heartbeat_at < $1 RETURNING agent_id",
        cutoff, limit)
    return [r["agent_id"] for r in rows]


async def lagging(conn: Conn, limit: int) -> list[asyncpg.Record]:
    """The ``limit`` agents furthest behind (inbox_seq - acked_seq > 0), largest first."""
    return await conn.fetch(
        "SELECT agent_id, inbox_seq - acked_seq AS lag FROM agents WHERE inbox_seq > acked_seq "
        "ORDER BY lag DESC, agent_id LIMIT $1", limit)
