"""Per-agent delivery leases: one process at a time reads an agent's inbox out.

An outbound reader of inboxes (the webhook process, ADR 035; the A2A bridge,
ADR 041) keeps one row per agent it serves, keyed by ``agent_id``, with
``lease_owner``, ``lease_until`` and ``next_attempt_at`` columns. A process takes
an agent's lease with a conditional UPDATE (the row lock makes two claims at
once end with one winner), renews it while it works, and gives it up at the end;
a dead process's lease lapses by itself. The agent's cursor is its
``acked_seq`` (every reader's), so the lease is all these tables add. The
statements are written once here for every such table; ``lane`` is what the
caller needs back after each step, read with the lease in one statement (the
registration as ``r``, the agent as ``a``).
"""

from __future__ import annotations

import asyncpg

Conn = asyncpg.Connection | asyncpg.Pool

_LEASE = "lease_until = now() + make_interval(secs => $3)"


class AgentLeases:
    def __init__(self, table: str, lane: str, also_due: str | None = None) -> None:
        self.table = table
        self.lane = lane
        # Besides events waiting: what else makes an agent due at a sweep (SQL on r, a).
        self.also_due = f" OR ({also_due})" if also_due else ""
        # For the caller's own updates under a held lease: $1 agent, $2 owner.
        self.mine = "a.agent_id = r.agent_id AND r.agent_id = $1 AND r.lease_owner = $2"
        self.renewed = _LEASE

    async def claim(self, conn: Conn, agent_id: str, owner: str, lease_seconds: float
                    ) -> asyncpg.Record | None:
        """Take the agent's lease if nobody holds a live one (None: another process
        serves this agent, or it has no row)."""
        return await conn.fetchrow(
            f"UPDATE {self.table} r SET lease_owner = $2, {_LEASE} FROM agents a "
            "WHERE a.agent_id = r.agent_id AND r.agent_id = $1 "
            "AND (r.lease_until IS NULL OR r.lease_until < now() OR r.lease_owner = $2) "
            f"RETURNING {self.lane}", agent_id, owner, lease_seconds)

    async def renew(self, conn: Conn, agent_id: str, owner: str, lease_seconds: float
                    ) -> asyncpg.Record | None:
        """Extend a held lease and re-read the lane (None: lost or deleted)."""
        return await conn.fetchrow(
            f"UPDATE {self.table} r SET {_LEASE} FROM agents a WHERE {self.mine} "
            f"RETURNING {self.lane}", agent_id, owner, lease_seconds)

    async def peek(self, conn: Conn, agent_id: str, owner: str) -> asyncpg.Record | None:
        """Re-read the lane under a lease this process holds and that is still
        live, writing nothing (None: lost, lapsed or deleted): no commit, so no
        WAL flush, on the way from a wake-up to the next POST."""
        return await conn.fetchrow(
            f"SELECT {self.lane} FROM {self.table} r, agents a WHERE {self.mine} "
            "AND r.lease_until > now()", agent_id, owner)

    async def release(self, conn: Conn, agent_id: str, owner: str) -> bool:
        """Give the lease up; True when events are waiting (committed while this
        process was finishing: it takes them on again rather than strand them)."""
        pending = await conn.fetchval(
            f"UPDATE {self.table} r SET lease_owner = NULL, lease_until = NULL FROM agents a "
            "WHERE a.agent_id = r.agent_id AND r.agent_id = $1 AND r.lease_owner = $2 "
            "RETURNING a.inbox_seq > GREATEST(a.acked_seq, a.inbox_floor) "
            "AND r.next_attempt_at <= now()", agent_id, owner)
        return bool(pending)

    async def sweep(self, conn: Conn, limit: int) -> list[asyncpg.Record]:
        """Every agent of the table and whether it is due now: events waiting (or
        ``also_due``), no retry pending, and no live lease (the safety net behind
        the wake-ups, and how a dead process's agents move on)."""
        return await conn.fetch(
            "SELECT r.agent_id, ((a.inbox_seq > GREATEST(a.acked_seq, a.inbox_floor)"
            f"{self.also_due}) AND r.next_attempt_at <= now() "
            " AND (r.lease_until IS NULL OR r.lease_until < now())) AS due "
            f"FROM {self.table} r JOIN agents a ON a.agent_id = r.agent_id "
            "ORDER BY r.agent_id LIMIT $1", limit)
