"""Retention: old terminal tasks, old acked inbox events and old agent runs are
deleted in bounded batches, optionally archived first. Off unless
``retention_days`` > 0 (keep forever is the default).

Each batch is one transaction: claim rows (``FOR UPDATE SKIP LOCKED``, so two
cron processes split the work), write them to ``<archive_dir>/*.jsonl.gz.partial``,
delete them, commit, then rename the archive to its final name. A batch that
rolls back removes its partial file, so a final archive holds exactly the rows
that were deleted; a crash between commit and rename leaves a ``.partial`` that
still holds exactly them.

Seqs are never reused and a client never waits on a deleted seq: deleting
inbox events raises the agent's ``inbox_floor`` to the highest seq deleted, in
the same statement. Only acked events go, so a client resuming from its acked
cursor (the default) sees exactly what it would have seen; one resuming from an
older cursor starts above the floor — those events were acked, i.e. processed.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import logging
import os
import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg

from app.domain.event_wire import format_timestamp
from app.platform.settings import Settings
from app.store import retention as store
from app.store import teams as teams_store
from app.store.writes import writes
from cron.jobs import MAX_BATCHES, db_now

log = logging.getLogger("mesh.cron")


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return format_timestamp(value)
    return str(value)


class Archive:
    """One batch's JSON lines, gzip-compressed; final only after the commit."""

    def __init__(self, folder: str | None, kind: str) -> None:
        self.final: Path | None = None
        self.partial: Path | None = None
        if folder:
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
            self.final = Path(folder) / f"{kind}-{stamp}-{uuid.uuid4().hex[:8]}.jsonl.gz"
            self.partial = self.final.with_name(self.final.name + ".partial")

    def write(self, rows: list[tuple[str, Mapping[str, Any]]]) -> None:
        if self.partial is None:
            return
        self.partial.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(self.partial, "wt", encoding="utf-8") as out:
            for table, row in rows:
                out.write(json.dumps({"table": table, "row": dict(row)}, ensure_ascii=False,
                                     default=_json_default) + "\n")
            out.flush()
            os.fsync(out.fileno())

    def commit(self) -> None:
        if self.partial is not None and self.final is not None and self.partial.exists():
            self.partial.rename(self.final)

    def discard(self) -> None:
        if self.partial is not None:
            self.partial.unlink(missing_ok=True)


@contextlib.contextmanager
def _archiving(settings: Settings, kind: str) -> Iterator[Archive]:
    """An archive that becomes final when the block (its batch's transaction)
    ends without an error, and is removed when it raises."""
    archive = Archive(settings.retention_archive_dir, kind)
    try:
        yield archive
    except BaseException:
        archive.discard()
        raise
    archive.commit()


async def _tasks_batch(pool: asyncpg.Pool, settings: Settings, cutoff: datetime,
                       batch: int) -> int:
    with _archiving(settings, "tasks") as archive:
        async with writes(pool) as tx:
            tasks = await store.claim_tasks(tx.conn, cutoff, batch)
            if not tasks:
                return 0
            ids = [t["task_id"] for t in tasks]
            children = await store.task_children(tx.conn, ids)
            archive.write([("tasks", t) for t in tasks] +
                          [(table, r) for table, rows in children.items() for r in rows])
            return await store.delete_tasks(tx.conn, ids)


async def _events_batch(pool: asyncpg.Pool, settings: Settings, cutoff: datetime,
                        batch: int) -> int:
    with _archiving(settings, "inbox") as archive:
        async with writes(pool) as tx:
            events = await store.claim_acked_events(tx.conn, cutoff, batch)
            if not events:
                return 0
            # The counter rows in append's order before the floors move: no deadlock.
            await teams_store.lock_counters(tx.conn, sorted({e["agent_id"] for e in events}))
            archive.write([("inbox_events", e) for e in events])
            return await store.delete_events(tx.conn, [e["agent_id"] for e in events],
                                             [e["seq"] for e in events])


async def _runs_batch(pool: asyncpg.Pool, settings: Settings, cutoff: datetime,
                      batch: int) -> int:
    with _archiving(settings, "runs") as archive:
        async with pool.acquire() as conn, conn.transaction():
            runs = await store.claim_runs(conn, cutoff, batch)
            if not runs:
                return 0
            archive.write([("agent_runs", r) for r in runs])
            return await store.delete_runs(conn, [r["agent_id"] for r in runs],
                                           [r["run_id"] for r in runs])


async def apply_retention(pool: asyncpg.Pool, settings: Settings, *,
                          now: datetime | None = None,
                          batch: int | None = None) -> dict[str, int]:
    """Delete (and archive) what is older than ``retention_days``; a no-op when 0."""
    result = {"tasks": 0, "inbox_events": 0, "agent_runs": 0, "batches": 0}
    if settings.retention_days <= 0:
        return result
    batch = batch or settings.retention_batch
    cutoff = (now or await db_now(pool)) - timedelta(days=settings.retention_days)
    for key, one in (("tasks", _tasks_batch), ("inbox_events", _events_batch),
                     ("agent_runs", _runs_batch)):
        for _ in range(MAX_BATCHES):
            n = await one(pool, settings, cutoff, batch)
            result[key] += n
            result["batches"] += 1
            if n < batch:
                break
    if result["tasks"] or result["inbox_events"]:
        log.info("cron: retention deleted %d task(s) and %d acked inbox event(s) older than "
                 "%d day(s)", result["tasks"], result["inbox_events"], settings.retention_days)
    return result
