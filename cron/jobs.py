"""The cron jobs, as plain async functions.

Each takes its pool and settings — or, where it calls a service, the cron
process's :class:`~app.services.mesh.Mesh` — and, where time matters, ``now``:
``None`` in production means the database clock (the one that stamped the rows),
and tests pass an instant in the future instead of sleeping 90 s or 24 h.

Every job is idempotent and safe when several cron processes run it at once.
Each batch is its own short transaction, claimed with ``FOR UPDATE SKIP
LOCKED`` or re-checked under a row lock, so two runs split the work or find
nothing left, and neither acts twice:

* :func:`expire_heartbeats` — active agents silent for ``heartbeat_ttl_seconds``
  become ``inactive``; ``draining`` agents are left alone.
* :func:`time_out_tasks` — open tasks idle for ``task_timeout_seconds`` become
  ``failed``; both agents get ``task.timeout`` (``app.services.tasks.time_out``).
* :func:`prune_outbox` — ``sent`` outbox rows older than ``outbox_retention_days``
  are deleted in bounded batches until a batch comes back short.
* :func:`alert_dead_letters` — new dead letters since the last alert: one warning
  log line and one Sentry message (counts only), whichever process notices first.
* :func:`update_gauges` — ``agent_mesh_consumer_lag_max`` (and, opted in with
  ``MESH_METRICS_AGENT_LABELS``, ``agent_mesh_consumer_lag{agent_id}`` for the
  agents furthest behind), ``agent_mesh_outbox_pending_total``, the dead-letter gauge.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import redis.asyncio as aioredis
import sentry_sdk
from prometheus_client import Gauge

from app.domain.task_states import OPEN
from app.platform.metrics import (
    AGENTS_NEAR_BUDGET,
    BUDGET_USED,
    BUDGET_USED_MAX,
    CONSUMER_LAG,
    CONSUMER_LAG_MAX,
    DEAD_LETTERS,
    OUTBOX_OLDEST_AGE,
    OUTBOX_PENDING,
    TASK_TIMEOUTS,
)
from app.platform.settings import Settings
from app.services import broadcasts as broadcasts_service
from app.services import tasks as tasks_service
from app.services.mesh import Mesh
from app.store import agents as agents_store
from app.store import broadcasts as broadcasts_store
from app.store import outbox as outbox_store
from app.store import runs as runs_store
from app.store import tasks as tasks_store
from app.store.writes import writes

log = logging.getLogger("mesh.cron")

HEARTBEAT_BATCH = 1000
TIMEOUT_BATCH = 100
# A job never loops forever, whatever the data: the next run picks up the rest.
MAX_BATCHES = 1000
LAG_TOP_N = 500


async def db_now(conn: asyncpg.Connection | asyncpg.Pool) -> datetime:
    return await conn.fetchval("SELECT now()")  # type: ignore[no-any-return]


# --- heartbeat expiry ----------------------------------------------------------------

async def expire_heartbeats(pool: asyncpg.Pool, settings: Settings, *,
                            now: datetime | None = None,
                            batch: int = HEARTBEAT_BATCH) -> list[str]:
    """Mark silent active agents inactive; return their ids."""
    expired: list[str] = []
    cutoff = (now or await db_now(pool)) - timedelta(seconds=settings.heartbeat_ttl_seconds)
    for _ in range(MAX_BATCHES):
        rows = await agents_store.expire_heartbeats(pool, cutoff, batch)
        expired += rows
        if len(rows) < batch:
            break
    if expired:
        log.info("cron: %d agent(s) without a heartbeat for %d s marked inactive",
                 len(expired), settings.heartbeat_ttl_seconds)
    return expired


# --- task activity timeout -----------------------------------------------------------

async def time_out_tasks(pool: asyncpg.Pool, settings: Settings, *,
                         now: datetime | None = None,
                         batch: int = TIMEOUT_BATCH) -> list[str]:
    """Fail open tasks idle longer than ``task_timeout_seconds``; return their ids.

    Candidates are read in batches; each one is then locked, re-checked (still
    open, still idle) and failed in its own transaction. A message appended
    meanwhile holds the same row lock and refreshes ``updated_at``, so a task
    that came back to life is never timed out; a second cron process waits on
    the lock, then finds the task failed and skips it."""
    cutoff = (now or await db_now(pool)) - timedelta(seconds=settings.task_timeout_seconds)
    moved: list[str] = []
    for _ in range(MAX_BATCHES):
        candidates = await tasks_store.idle_open_tasks(pool, cutoff, batch)
        for candidate in candidates:
            task_id = candidate["task_id"]
            try:
                if await _time_out_one(pool, settings, task_id, cutoff):
                    moved.append(task_id)
                    TASK_TIMEOUTS.inc()
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
                # One bad row must not stop the others; it is tried again next run.
                log.warning("cron: timing out task %s failed: %s", task_id, exc)
        if len(candidates) < batch:
            break
    if moved:
        log.info("cron: %d task(s) idle for %d s failed by timeout", len(moved),
                 settings.task_timeout_seconds)
    return moved


async def _time_out_one(pool: asyncpg.Pool, settings: Settings, task_id: str,
                        cutoff: datetime) -> bool:
    # writes() wakes the relay once this commits: the task.timeout events go out
    # now, not at the relay's next sweep.
    async with writes(pool, topic=settings.bus_topic) as tx:
        task = await tasks_store.get(tx.conn, task_id, for_update=True)
        if task is None or task["state"] not in OPEN or task["updated_at"] >= cutoff:
            return False  # another cron process got it, or it saw activity meanwhile
        return await tasks_service.time_out(tx, settings, task) is not None


# --- outbox retention ----------------------------------------------------------------

async def prune_outbox(pool: asyncpg.Pool, settings: Settings, *,
                       now: datetime | None = None,
                       batch: int | None = None) -> dict[str, int]:
    """Delete sent rows older than the retention period, one short transaction per
    batch, until a batch comes back short. Pending and failed rows are never touched."""
    batch = batch or settings.outbox_retention_batch
    cutoff = (now or await db_now(pool)) - timedelta(days=settings.outbox_retention_days)
    deleted = batches = 0
    for _ in range(MAX_BATCHES):
        n = await outbox_store.delete_sent_until(pool, cutoff, batch)
        deleted += n
        batches += 1
        if n < batch:
            break
    if deleted:
        log.info("cron: pruned %d sent outbox row(s) older than %d day(s) in %d batch(es)",
                 deleted, settings.outbox_retention_days, batches)
    return {"deleted": deleted, "batches": batches}


# --- dead-letter alert ---------------------------------------------------------------

# KEYS[1] the high-water mark (highest dead-letter id already alerted on);
# ARGV[1] the highest dead-letter id seen now. Moves the mark forward only and
# returns the previous mark, or -1 when it was already there: of two processes
# that saw the same new rows, exactly one gets to alert on them.
ADVANCE_MARK_LUA = """
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local seen = tonumber(ARGV[1])
if seen > current then
  redis.call('SET', KEYS[1], ARGV[1])
  return current
end
return -1
"""


def dead_letter_mark_key(settings: Settings) -> str:
    """Per database: outbox ids mean nothing across two meshes sharing one Redis."""
    database = urlsplit(settings.database_url).path.lstrip("/") or "default"
    return f"mesh:cron:dead-letter-mark:{database}"


async def alert_dead_letters(pool: asyncpg.Pool, redis: aioredis.Redis,
                             settings: Settings) -> dict[str, int]:
    """Alert once on dead letters that appeared since the last alert.

    The mark is advanced before alerting, so a crash in between loses that alert
    rather than repeating it; the ``agent_mesh_outbox_failed_total`` gauge still
    shows the rows. Only counts leave the process, never a payload."""
    total, top = await outbox_store.failed_summary(pool)
    try:
        return await _alert_new_dead_letters(redis, settings, pool, total, top)
    finally:
        # Set as the job returns, after its awaits: a relay in the same process sets
        # this gauge from its own count every few seconds, and must not land between
        # this set and a caller's read.
        DEAD_LETTERS.set(total)


async def _alert_new_dead_letters(redis: aioredis.Redis, settings: Settings,
                                  pool: asyncpg.Pool, total: int, top: int) -> dict[str, int]:
    result = {"failed": total, "new": 0}
    if top == 0:
        return result
    previous = int(await redis.eval(ADVANCE_MARK_LUA, 1, dead_letter_mark_key(settings), top))
    if previous < 0:
        return result
    new = await outbox_store.count_failed_between(pool, previous, top)
    result["new"] = new
    if new:
        text = (f"outbox: {new} new dead letter(s), {total} in total; inspect with "
                "GET /v1/admin/outbox/dead and retry with POST /v1/admin/outbox/dead/retry")
        log.warning(text)
        sentry_sdk.capture_message(text, level="warning")
    return result


# --- gauges --------------------------------------------------------------------------

# Labels this process exported last time, so agents that caught up (or were
# deleted) disappear from /metrics instead of showing a stale lag forever.
_lag_labels: set[str] = set()


def _export_per_agent(gauge: Gauge, values: dict[str, float], exported: set[str]) -> None:
    """Set one ``agent_id`` series per value; remove the series ``exported`` last
    time that are gone now (``exported`` is updated in place)."""
    for agent_id in exported - values.keys():
        try:
            gauge.remove(agent_id)
        except KeyError:
            pass
    for agent_id, value in values.items():
        gauge.labels(agent_id=agent_id).set(value)
    exported.clear()
    exported.update(values)


async def update_gauges(pool: asyncpg.Pool, *, top_n: int = LAG_TOP_N,
                        per_agent: bool = False) -> dict[str, Any]:
    """The largest consumer lag and the outbox gauges; with ``per_agent``
    (``MESH_METRICS_AGENT_LABELS``) also the lag of the ``top_n`` agents furthest
    behind, one ``agent_id`` label each."""
    rows = await agents_store.lagging(pool, top_n if per_agent else 1)
    pending, failed = await outbox_store.open_counts(pool)
    current = {r["agent_id"]: int(r["lag"]) for r in rows}
    CONSUMER_LAG_MAX.set(max(current.values(), default=0))
    _export_per_agent(CONSUMER_LAG, current if per_agent else {}, _lag_labels)
    OUTBOX_PENDING.set(pending)
    DEAD_LETTERS.set(failed)
    oldest = await outbox_store.oldest_pending_at(pool) if pending else None
    OUTBOX_OLDEST_AGE.set(0.0 if oldest is None
                          else max(0.0, (datetime.now(oldest.tzinfo) - oldest).total_seconds()))
    near = await update_budget_gauges(pool, per_agent=per_agent)
    return {"lagging": len(current), "max_lag": max(current.values(), default=0),
            "pending": pending, "failed": failed, "near_budget": near}


# An agent "near" its daily budget, for the alert (deploy/prometheus/alerts.yml).
NEAR_BUDGET = 0.8
_budget_labels: set[str] = set()


def budget_ratio(spent: float, budget: float) -> float:
    """Today's spend as a share of the daily budget; a budget of 0 is reached at once."""
    return 1.0 if budget <= 0 else spent / budget


async def update_budget_gauges(pool: asyncpg.Pool, *, per_agent: bool = False) -> int:
    """The daily-budget gauges (ADR 047); returns how many agents are near theirs."""
    ratios = {r["agent_id"]: budget_ratio(r["spent"], r["budget"])
              for r in await runs_store.budget_use(pool)}
    near = sum(1 for v in ratios.values() if v >= NEAR_BUDGET)
    BUDGET_USED_MAX.set(max(ratios.values(), default=0.0))
    AGENTS_NEAR_BUDGET.set(near)
    _export_per_agent(BUDGET_USED, ratios if per_agent else {}, _budget_labels)
    return near


# --- broadcast deadlines ----------------------------------------------------

BROADCAST_BATCH = 100


async def settle_broadcasts(mesh: Mesh, *, now: datetime | None = None,
                            batch: int = BROADCAST_BATCH) -> list[str]:
    """Open broadcasts past their deadline settle as ``timeout``: the sender gets
    its one ``broadcast.completed`` naming the recipients that did not finish.
    Each is locked and re-checked in its own transaction
    (``app.services.broadcasts.settle_due``), so a completion racing the deadline
    or a second cron process makes it settle once."""
    pool = mesh.pool
    now = now or await db_now(pool)
    settled: list[str] = []
    for _ in range(MAX_BATCHES):
        due = await broadcasts_store.due(pool, now, batch)
        progressed = False
        for broadcast_id in due:
            try:
                if await broadcasts_service.settle_due(mesh, broadcast_id, now):
                    settled.append(broadcast_id)
                progressed = True
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
                log.warning("cron: settling broadcast %s failed: %s", broadcast_id, exc)
        if len(due) < batch or not progressed:
            break
    if settled:
        log.info("cron: %d broadcast(s) settled by their timeout", len(settled))
    return settled
