"""The outbox: claimed by relays, updated in batches, inspected by admins."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import asyncpg

from app.domain.event_wire import encode_event

Conn = asyncpg.Connection | asyncpg.Pool

# Due pending rows of one topic, oldest first; rows another relay holds are
# skipped, so any number of relays share the work without waiting on each other.
# An event row's envelope names its inbox row (event_id is unique there), which
# is joined here so the relay encodes the event itself (ADR 014): the batch claim
# does that work, not the web request. A row without an event_id (written by
# hand or by another producer) is relayed as it is.
CLAIM_SQL = """
SELECT o.id, o.key, o.payload::text AS raw, o.attempts, o.payload ? 'event_id' AS is_event,
       e.seq, e.event_id, e.type, e.task_id, e.context_id, e.from_agent_id, e.created_at,
       e.payload, e.traceparent
FROM outbox_events o
LEFT JOIN inbox_events e ON e.event_id = o.payload->>'event_id'
WHERE o.status = 'pending' AND o.next_attempt_at <= statement_timestamp() AND o.topic = $2
ORDER BY o.id LIMIT $1
FOR UPDATE OF o SKIP LOCKED
"""


# A claim's transaction opens with four settings:
# * a "sent" mark lost in a crash only means the rows are published again, which
#   the push fan-out drops by seq: no need to wait for the WAL flush of every batch;
# * the claim must walk outbox_pending_idx in id order and stop after ``limit``
#   rows. Right after a burst of inserts (a backlog, the bench's 50,000 rows) the
#   statistics still say "about one pending row", and the planner then prefers a
#   bitmap scan of every pending row, joined and sorted on disk before the LIMIT:
#   250-750 ms per claim instead of ~1 ms, so a backlog drained in O(n²). Without
#   bitmap scans the only cheap plan left is the ordered index scan.
# * the claim and the sent mark's UPDATE (inside outbox_mark_sent) keep one plan
#   per connection: Postgres's plan cache chose a plan of their own for each call's
#   values (the mark's id array, sometimes the claim's limit), planned anew every
#   batch. Their generic plans are the ones above (the ordered pending index, the
#   primary key) and cost ~0.03 ms less Postgres CPU per batch
#   (bench/results/2026-12-06-wake-ups-fillfactor-plans.md).
# * a relay's own connection waits between batches with the next claim's
#   transaction begun (below), which an operator's idle_in_transaction_session_timeout
#   must not end. It holds no lock, no transaction id and no snapshot while it
#   waits (each statement takes its own), so it keeps nothing from VACUUM.
#
# At a trickle every batch pays its whole transaction (ADR 027): the BEGIN and
# the settings share one simple-query round trip, and the sent mark shares the
# COMMIT's (commit_sent), which can also begin the next claim's transaction
# (``begin_next``: ADR 062), so a batch costs two round trips: the claim, then
# the mark with the COMMIT and the next BEGIN. The mark there is a call of
# outbox_mark_sent (PL/pgSQL keeps the UPDATE prepared, and the third setting its
# one plan), not the UPDATE itself, which would be parsed and planned anew for
# every batch. Since a transaction may begin long before its claim, the times the
# claim compares and writes are its statements' (statement_timestamp()), not the
# transaction's start (now()).
CLAIM_BEGIN_SQL = ("BEGIN; SET LOCAL synchronous_commit = off; "
                   "SET LOCAL enable_bitmapscan = off; "
                   "SET LOCAL plan_cache_mode = force_generic_plan; "
                   "SET LOCAL idle_in_transaction_session_timeout = 0")


async def begin_claim(conn: asyncpg.Connection) -> None:
    """Open the claim's transaction on ``conn``; end it with :func:`commit_sent`
    or :func:`rollback`."""
    await conn.execute(CLAIM_BEGIN_SQL)


def _then_begin(sql: str, begin_next: bool) -> str:
    return f"{sql}; {CLAIM_BEGIN_SQL}" if begin_next else sql


async def claim(conn: asyncpg.Connection, limit: int, topic: str) -> list[asyncpg.Record]:
    """Lock up to ``limit`` due rows for the transaction :func:`begin_claim` opened."""
    return await conn.fetch(CLAIM_SQL, limit, topic)


def _sent_sql(ids: Sequence[int]) -> str:
    """The mark and the COMMIT as one simple query. A simple query takes no
    parameters, so the ids are written into it: integers only, by construction."""
    if not ids:
        return "COMMIT"
    return f"SELECT outbox_mark_sent('{{{','.join(str(int(i)) for i in ids)}}}'); COMMIT"


async def commit_sent(conn: asyncpg.Connection, ids: Sequence[int], *,
                      begin_next: bool = False) -> None:
    """Mark ``ids`` sent and commit the claim's transaction, in one round trip;
    with ``begin_next`` the next claim's transaction is begun in it too."""
    await conn.execute(_then_begin(_sent_sql(ids), begin_next))


async def rollback(conn: asyncpg.Connection, *, begin_next: bool = False) -> None:
    await conn.execute(_then_begin("ROLLBACK", begin_next))


def bus_value(row: asyncpg.Record) -> bytes | None:
    """The bytes to publish for a claimed row: the event's wire form, the
    payload of a non-event row, or None when the event's inbox row is missing
    (it is written in the same statement, so never; dead-lettered if it were)."""
    if not row["is_event"]:
        return str(row["raw"]).encode()
    if row["event_id"] is None:
        return None
    return encode_event(row)


async def mark_failed_attempts(conn: asyncpg.Connection, ids: Sequence[int], errors: Sequence[str],
                               dead: Sequence[bool], base_seconds: float) -> None:
    """One round trip for a batch's failures: each row gets attempts+1 and either
    a backed-off next attempt (base·2^attempts) or the dead letter."""
    if not ids:
        return
    await conn.execute(
        """
        UPDATE outbox_events o SET
            attempts = o.attempts + 1,
            last_error = f.error,
            status = CASE WHEN f.dead THEN 'failed' ELSE 'pending' END,
            next_attempt_at = statement_timestamp() + make_interval(secs => $4 * power(2, o.attempts))
        FROM unnest($1::bigint[], $2::text[], $3::bool[]) AS f(id, error, dead)
        WHERE o.id = f.id
        """, list(ids), list(errors), list(dead), base_seconds)


async def open_counts(conn: Conn) -> tuple[int, int]:
    """(pending, failed), each an index-only count over its partial index —
    cheap enough for a gauge, unlike a GROUP BY over every sent row kept."""
    row = await conn.fetchrow(
        "SELECT (SELECT count(*) FROM outbox_events WHERE status = 'pending') AS pending, "
        "(SELECT count(*) FROM outbox_events WHERE status = 'failed') AS failed")
    assert row is not None
    return int(row["pending"]), int(row["failed"])


async def counts(conn: Conn) -> dict[str, int]:
    rows = await conn.fetch("SELECT status, count(*) AS n FROM outbox_events GROUP BY status")
    out = {"pending": 0, "sent": 0, "failed": 0}
    out.update({r["status"]: r["n"] for r in rows})
    return out


async def dead_letters(conn: Conn, limit: int, after_id: int = 0) -> list[asyncpg.Record]:
    # The envelope with the event's content put back, so a dead letter's size
    # is judged on what the relay tried to publish.
    return await conn.fetch(
        "SELECT o.id, o.topic, o.key, "
        "CASE WHEN e.payload IS NULL THEN o.payload "
        "ELSE o.payload || jsonb_build_object('payload', e.payload) END AS payload, "
        "o.attempts, o.last_error, o.created_at, o.next_attempt_at "
        "FROM outbox_events o LEFT JOIN inbox_events e "
        "ON e.event_id = o.payload->>'event_id' "
        "WHERE o.status = 'failed' AND o.id > $1 ORDER BY o.id LIMIT $2",
        after_id, limit)


async def retry_dead(conn: Conn, ids: Sequence[int] | None) -> int:
    """Back to pending with a fresh attempt budget; None retries every dead letter."""
    if ids is None:
        result = await conn.execute(
            "UPDATE outbox_events SET status = 'pending', attempts = 0, next_attempt_at = now() "
            "WHERE status = 'failed'")
    else:
        result = await conn.execute(
            "UPDATE outbox_events SET status = 'pending', attempts = 0, next_attempt_at = now() "
            "WHERE status = 'failed' AND id = ANY($1::bigint[])", list(ids))
    return int(result.split()[-1])


async def delete_sent_until(conn: Conn, cutoff: datetime, batch: int) -> int:
    """Delete one bounded batch of rows sent before ``cutoff`` (an explicit instant,
    so the cron job's clock is the caller's; short locks, the caller loops)."""
    result = await conn.execute(
        """
        DELETE FROM outbox_events WHERE id IN (
            SELECT id FROM outbox_events
            WHERE status = 'sent' AND sent_at < $1
            ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)
        """, cutoff, batch)
    return int(result.split()[-1])


async def failed_summary(conn: Conn) -> tuple[int, int]:
    """(number of dead letters, highest dead-letter id or 0)."""
    row = await conn.fetchrow(
        "SELECT count(*) AS n, COALESCE(max(id), 0) AS top FROM outbox_events "
        "WHERE status = 'failed'")
    return int(row["n"]), int(row["top"])


async def count_failed_between(conn: Conn, after_id: int, up_to_id: int) -> int:
    """Dead letters with ``after_id < id <= up_to_id``."""
    return int(await conn.fetchval(
        "SELECT count(*) FROM outbox_events WHERE status = 'failed' AND id > $1 AND id <= $2",
        after_id, up_to_id))


async def oldest_pending_at(conn: Conn) -> datetime | None:
    return await conn.fetchval(  # type: ignore[no-any-return]
        "SELECT min(created_at) FROM outbox_events WHERE status = 'pending'")


async def get_status(conn: Conn, row_id: int) -> str | None:
    return await conn.fetchval(  # type: ignore[no-any-return]
        "SELECT status FROM outbox_events WHERE id = $1", row_id)


async def wake_relay(conn: Conn) -> None:
    """NOTIFY the relays; delivered when (and only if) the caller's transaction commits."""
    from app.store.events import WAKEUP_CHANNEL

    await conn.execute("SELECT pg_notify($1, '')", WAKEUP_CHANNEL)
