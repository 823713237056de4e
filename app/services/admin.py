"""Outbox operations for admin owners: counts, dead letters, retry.

A retry puts a dead letter back to ``pending`` with a fresh attempt budget in a
unit of work (app.store.writes) that wakes the relays once it commits, so they pick
it up at once. It cannot
duplicate a delivery: only ``failed`` rows are flipped (a second retry of the same
row finds it pending and does nothing), a row is relayed by one relay at a time
(``SKIP LOCKED``), and should a record that was already on the bus be published
again, the push fan-out drops its seq and SSE never repeats one.

Dead letters are shown with their envelope (recipient, seq, type, task, error) but
not the message content: operating the mesh does not need reading agents' mail.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import asyncpg

from app.platform.errors import conflict, not_found
from app.responses import DeadLetter, DeadLetterEnvelope, DeadLetters, OutboxOverview, RetriedAll, RetriedOne
from app.services.mesh import Mesh
from app.store import outbox as outbox_store
from app.store.writes import writes

RETRY_ALL_BATCH = 1000


async def outbox_overview(pool: asyncpg.Pool) -> OutboxOverview:
    counts = await outbox_store.counts(pool)
    oldest = await outbox_store.oldest_pending_at(pool)
    age = (datetime.now(UTC) - oldest).total_seconds() if oldest is not None else 0.0
    return OutboxOverview(counts=counts, oldest_pending_age_seconds=round(max(age, 0.0), 3))


def dead_letter(row: asyncpg.Record) -> DeadLetter:
    payload = row["payload"]
    if isinstance(payload, str):
        payload = json.loads(payload)
    envelope = payload if isinstance(payload, dict) else {}
    return DeadLetter.of(
        row, recipient=row["key"],
        event=DeadLetterEnvelope(**{k: envelope.get(k) for k in (
            "seq", "event_id", "type", "task_id", "context_id", "from_agent_id")}),
        payload_bytes=len(json.dumps(payload, separators=(",", ":")).encode()))


async def dead_letters(pool: asyncpg.Pool, *, after_id: int, limit: int) -> DeadLetters:
    rows = await outbox_store.dead_letters(pool, limit, after_id)
    return DeadLetters(dead_letters=[dead_letter(r) for r in rows],
                       next_after_id=rows[-1]["id"] if len(rows) == limit else None)


async def retry_one(mesh: Mesh, row_id: int) -> RetriedOne:
    async with writes(mesh.pool, wakeup=mesh.wakeup) as tx:
        if await outbox_store.retry_dead(tx.conn, [row_id]) == 1:
            tx.requeued()
            return RetriedOne(retried=1, ids=[row_id])
        status = await outbox_store.get_status(tx.conn, row_id)
    if status is None:
        raise not_found(f"no outbox row {row_id}; list dead letters with GET /v1/admin/outbox/dead")
    raise conflict(f"outbox row {row_id} is '{status}', not a dead letter; only failed rows "
                   "can be retried", outbox_status=status)


async def retry_all(mesh: Mesh) -> RetriedAll:
    """Every dead letter back to pending, in batches of short transactions (a large
    dead-letter pile never holds one long lock)."""
    retried, after = 0, 0
    while True:
        async with writes(mesh.pool, wakeup=mesh.wakeup) as tx:
            rows = await outbox_store.dead_letters(tx.conn, RETRY_ALL_BATCH, after)
            if not rows:
                break
            after = rows[-1]["id"]
            n = await outbox_store.retry_dead(tx.conn, [r["id"] for r in rows])
            if n:
                tx.requeued()
            retried += n
        if len(rows) < RETRY_ALL_BATCH:
            break
    return RetriedAll(retried=retried)
