"""Outbox operations for admin owners: counts, dead letters, retry (issue 4 §5).

A retry puts a dead letter back to ``pending`` with a fresh attempt budget and
NOTIFYs the relays in the same transaction, so they pick it up at once. It cannot
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
from typing import Any

import asyncpg

from app.errors import conflict, not_found
from app.store import outbox as outbox_store

RETRY_ALL_BATCH = 1000


async def outbox_overview(pool: asyncpg.Pool) -> dict[str, Any]:
    counts = await outbox_store.counts(pool)
    oldest = await outbox_store.oldest_pending_at(pool)
    age = (datetime.now(UTC) - oldest).total_seconds() if oldest is not None else 0.0
    return {"counts": counts, "oldest_pending_age_seconds": round(max(age, 0.0), 3)}


def dead_letter_json(row: asyncpg.Record) -> dict[str, Any]:
    payload = row["payload"]
    if isinstance(payload, str):
        payload = json.loads(payload)
    envelope = payload if isinstance(payload, dict) else {}
    return {
        "id": row["id"], "topic": row["topic"], "recipient": row["key"],
        "attempts": row["attempts"], "last_error": row["last_error"],
        "created_at": row["created_at"].isoformat(),
        "event": {k: envelope.get(k) for k in ("seq", "event_id", "type", "task_id",
                                                "context_id", "from_agent_id")},
        "payload_bytes": len(json.dumps(payload, separators=(",", ":")).encode()),
    }


async def dead_letters(pool: asyncpg.Pool, *, after_id: int, limit: int) -> dict[str, Any]:
    rows = await outbox_store.dead_letters(pool, limit, after_id)
    return {"dead_letters": [dead_letter_json(r) for r in rows],
            "next_after_id": rows[-1]["id"] if len(rows) == limit else None}


async def retry_one(pool: asyncpg.Pool, row_id: int) -> dict[str, Any]:
    async with pool.acquire() as conn, conn.transaction():
        if await outbox_store.retry_dead(conn, [row_id]) == 1:
            await outbox_store.wake_relay(conn)
            return {"retried": 1, "ids": [row_id]}
        status = await outbox_store.get_status(conn, row_id)
    if status is None:
        raise not_found(f"no outbox row {row_id}; list dead letters with GET /v1/admin/outbox/dead")
    raise conflict(f"outbox row {row_id} is '{status}', not a dead letter; only failed rows "
                   "can be retried", outbox_status=status)


async def retry_all(pool: asyncpg.Pool) -> dict[str, Any]:
    """Every dead letter back to pending, in batches of short transactions (a large
    dead-letter pile never holds one long lock)."""
    retried, after = 0, 0
    while True:
        async with pool.acquire() as conn, conn.transaction():
            rows = await outbox_store.dead_letters(conn, RETRY_ALL_BATCH, after)
            if not rows:
                break
            after = rows[-1]["id"]
            n = await outbox_store.retry_dead(conn, [r["id"] for r in rows])
            if n:
                await outbox_store.wake_relay(conn)
            retried += n
        if len(rows) < RETRY_ALL_BATCH:
            break
    return {"retried": retried}
