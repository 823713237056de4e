"""Reading an agent's inbox from Postgres (the source of truth)."""

from __future__ import annotations

import asyncpg

from app.domain.event_wire import EVENT_COLUMNS, WireEvent, wire_event

Conn = asyncpg.Connection | asyncpg.Pool

_SELECT = f"SELECT {EVENT_COLUMNS} FROM inbox_events "


# `after`, but never below the agent's floor (events of a deleted predecessor
# with the same agent_id).
_FLOORED = "GREATEST($2, (SELECT inbox_floor FROM agents WHERE agent_id = $1))"


async def after(conn: Conn, agent_id: str, after_seq: int, limit: int,
                upto: int | None = None) -> list[WireEvent]:
    """Events with seq in (after_seq, upto], oldest first, in their wire form."""
    if upto is None:
        rows = await conn.fetch(
            _SELECT + f"WHERE agent_id = $1 AND seq > {_FLOORED} ORDER BY seq LIMIT $3",
            agent_id, after_seq, limit)
    else:
        rows = await conn.fetch(
            _SELECT + f"WHERE agent_id = $1 AND seq > {_FLOORED} AND seq <= $3 "
            f"ORDER BY seq LIMIT $4", agent_id, after_seq, upto, limit)
    return [wire_event(r) for r in rows]


async def mark_delivered(conn: Conn, agent_id: str, first_seq: int, last_seq: int) -> list[float]:
    """Record the first hand-over to a client; returns the commit→now latency (s)
    of the events delivered for the first time, for the e2e histogram."""
    rows = await conn.fetch(
        "UPDATE inbox_events SET delivered_at = clock_timestamp() "
        "WHERE agent_id = $1 AND seq BETWEEN $2 AND $3 AND delivered_at IS NULL "
        "RETURNING EXTRACT(EPOCH FROM (delivered_at - created_at))::float8 AS latency",
        agent_id, first_seq, last_seq)
    return [r["latency"] for r in rows]


# Each hand-over is (agent, first seq, last seq, seconds since it happened): the mark
# is dated back by that age on the database's own clock, so a batch written 50 ms
# later still records when the client got the events, and no web host's clock is
# compared with Postgres's. ``async_commit`` is SET LOCAL synchronous_commit = off
# inside the statement's own transaction (Postgres reads the setting at commit), so
# the flush stays one statement and one round trip instead of BEGIN/SET/…/COMMIT.
_MARK_MANY = """
WITH async_commit AS (SELECT set_config('synchronous_commit', 'off', true) AS off)
UPDATE inbox_events e
SET delivered_at = clock_timestamp() - make_interval(secs => h.age)
FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::float8[]) AS h(agent_id, first_seq,
                                                                       last_seq, age),
     async_commit
WHERE e.agent_id = h.agent_id AND e.seq BETWEEN h.first_seq AND h.last_seq
  AND e.delivered_at IS NULL
RETURNING EXTRACT(EPOCH FROM (e.delivered_at - e.created_at))::float8 AS latency
"""


async def mark_delivered_many(conn: Conn,
                              handovers: list[tuple[str, int, int, float]]) -> list[float]:
    """:func:`mark_delivered` for many hand-overs in ONE statement, committed without
    waiting for the WAL flush: a receipt mark is best effort (ADR 021), and a mark
    lost to a Postgres crash is only a receipt that stays ``queued`` until the
    events are handed over again or acked. Returns the latencies, as there."""
    if not handovers:
        return []
    agents, firsts, lasts, ages = zip(*handovers, strict=True)
    rows = await conn.fetch(_MARK_MANY, list(agents), list(firsts), list(lasts), list(ages))
    return [r["latency"] for r in rows]


async def cursor(conn: Conn, agent_id: str) -> asyncpg.Record | None:
    return await conn.fetchrow(
        "SELECT inbox_seq, acked_seq, inbox_floor FROM agents WHERE agent_id = $1", agent_id)


async def receipts(conn: Conn, agent_id: str, seqs: list[int]) -> dict[int, asyncpg.Record]:
    rows = await conn.fetch(
        "SELECT e.seq, e.delivered_at, (e.seq <= a.acked_seq) AS acked FROM inbox_events e "
        "JOIN agents a ON a.agent_id = e.agent_id WHERE e.agent_id = $1 AND e.seq = ANY($2::bigint[])",
        agent_id, seqs)
    return {r["seq"]: r for r in rows}


async def task_events_after(conn: Conn, agent_id: str, task_id: str, after_seq: int,
                            limit: int) -> list[asyncpg.Record]:
    """One task's events in one agent's inbox after ``after_seq``, oldest first
    (the A2A per-task stream, ADR 017)."""
    return await conn.fetch(
        _SELECT + f"WHERE agent_id = $1 AND task_id = $3 AND seq > {_FLOORED} "
        "ORDER BY seq LIMIT $4", agent_id, after_seq, task_id, limit)


async def last_task_seq(conn: Conn, agent_id: str, task_id: str) -> int:
    """The newest seq of one task's events in one agent's inbox (0: none yet)."""
    value = await conn.fetchval(
        "SELECT max(seq) FROM inbox_events WHERE agent_id = $1 AND task_id = $2",
        agent_id, task_id)
    return int(value or 0)


async def task_state_at(conn: Conn, agent_id: str, task_id: str, upto_seq: int) -> str | None:
    """The task state the newest status event up to ``upto_seq`` in this agent's
    inbox left behind (None: no status event yet)."""
    value = await conn.fetchval(
        "SELECT payload->>'state' FROM inbox_events WHERE agent_id = $1 AND task_id = $2 "
        "AND seq <= $3 AND type IN ('task.status', 'task.timeout') ORDER BY seq DESC LIMIT 1",
        agent_id, task_id, upto_seq)
    return None if value is None else str(value)


async def newest_seqs(conn: Conn, agent_ids: list[str]) -> dict[str, int]:
    """Each agent's newest inbox seq (0 for none): one statement for the SSE
    re-check of every open stream of a web process (app.services.inbox_stream)."""
    rows = await conn.fetch(
        "SELECT w.agent_id, COALESCE((SELECT max(i.seq) FROM inbox_events i "
        "WHERE i.agent_id = w.agent_id), 0) AS newest FROM unnest($1::text[]) AS w(agent_id)",
        agent_ids)
    return {r["agent_id"]: int(r["newest"]) for r in rows}


async def claim(pool: asyncpg.Pool, agent_id: str, limit: int) -> list[WireEvent] | None:
    """Hand over the events after the acked cursor and ack them, in one transaction
    that holds the agent's row: two readers claiming at once get disjoint events (the
    second waits for the first, then reads after what it acked). While a runtime of
    the agent holds a live claim on an unacked event (app.store.agents.claim_event)
    the events are its own and nothing is handed over; a lapsed claim is ended and
    its event handed over. None: no such agent."""
    async with pool.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(
            "SELECT acked_seq, claim_seq > acked_seq AS in_flight, "
            "COALESCE(claim_until > now(), false) AS live "
            "FROM agents WHERE agent_id = $1 FOR UPDATE", agent_id)
        if row is None:
            return None
        if row["in_flight"]:
            if row["live"]:
                return []
            await conn.execute("UPDATE agents SET claim_owner = NULL, claim_seq = 0, "
                               "claim_until = NULL WHERE agent_id = $1", agent_id)
        events = await after(conn, agent_id, int(row["acked_seq"]), limit)
        if events:
            await conn.execute(
                "UPDATE agents SET acked_seq = GREATEST(acked_seq, LEAST($2::bigint, inbox_seq)) "
                "WHERE agent_id = $1", agent_id, events[-1].seq)
        return events
