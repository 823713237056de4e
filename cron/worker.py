"""The cron process: ``arq cron.worker.WorkerSettings`` (the Procfile ``cron`` line).

arq schedules the jobs of :mod:`cron.jobs`. With ``unique=True`` every process
derives the same job id for the same tick, so when several cron processes run,
each tick is enqueued once and run by one of them; the jobs are safe to overlap
anyway (``run_at_startup`` makes every process run each job once when it starts,
and a slow run may meet the next tick).

SIGTERM: arq stops taking jobs and waits up to ``job_completion_wait`` seconds for
the running ones; a job still running after that is cancelled, which rolls back
only its current batch (every batch is its own transaction).
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import redis.asyncio as aioredis
from arq import cron

from app.platform import db
from app.platform.settings import Settings, load_settings
from app.services.mesh import Mesh
from cron import jobs, retention
from workers.process import arq_redis_settings, setup_process

log = logging.getLogger("mesh.cron")


async def startup(ctx: dict[str, Any]) -> None:
    settings: Settings = ctx.get("settings") or load_settings()
    setup_process(settings, "cron")
    # arq's CLI gave its logger a handler of its own; one line per event is enough,
    # through the root handler (which also redacts).
    logging.getLogger("arq").handlers.clear()
    # arq logs every job run at INFO ("→ cron:gauges()" every few seconds); the
    # jobs log themselves when they did something, so arq's lines are DEBUG-only.
    if logging.getLevelName(settings.log_level.upper()) != logging.DEBUG:
        logging.getLogger("arq.worker").setLevel(logging.WARNING)
    pool = await db.create_pool(settings, min_size=1, max_size=4)
    # The services' one context, as the web lifespan builds it, without the web
    # process's caches and batcher (its Redis connects on first use).
    mesh = Mesh(pool, settings, aioredis.from_url(settings.redis_url))
    ctx.update(settings=settings, pool=pool, mesh=mesh)
    log.info("cron started: heartbeat ttl %d s, task timeout %d s, outbox retention %d day(s)",
             settings.heartbeat_ttl_seconds, settings.task_timeout_seconds,
             settings.outbox_retention_days)


async def shutdown(ctx: dict[str, Any]) -> None:
    if ctx.get("mesh") is not None:
        await ctx["mesh"].redis.aclose()
    if ctx.get("pool") is not None:
        await ctx["pool"].close()
    log.info("cron stopped")


async def heartbeat_expiry(ctx: dict[str, Any]) -> int:
    return len(await jobs.expire_heartbeats(ctx["pool"], ctx["settings"]))


async def task_timeout(ctx: dict[str, Any]) -> int:
    return len(await jobs.time_out_tasks(ctx["pool"], ctx["settings"]))


async def outbox_retention(ctx: dict[str, Any]) -> dict[str, int]:
    return await jobs.prune_outbox(ctx["pool"], ctx["settings"])


async def dead_letter_alert(ctx: dict[str, Any]) -> dict[str, int]:
    # ctx["redis"] is arq's own connection (with its reconnect settings).
    return await jobs.alert_dead_letters(ctx["pool"], ctx["redis"], ctx["settings"])


async def gauges(ctx: dict[str, Any]) -> dict[str, Any]:
    return await jobs.update_gauges(ctx["pool"],
                                    per_agent=ctx["settings"].metrics_agent_labels)


async def broadcast_timeout(ctx: dict[str, Any]) -> int:
    return len(await jobs.settle_broadcasts(ctx["mesh"]))


async def data_retention(ctx: dict[str, Any]) -> dict[str, int]:
    return await retention.apply_retention(ctx["pool"], ctx["settings"])


EVERY_15_S = {0, 15, 30, 45}


class WorkerSettings:
    cron_jobs: ClassVar = [
        cron(heartbeat_expiry, second=EVERY_15_S, unique=True, run_at_startup=True, timeout=60),
        cron(gauges, second={7, 22, 37, 52}, unique=True, run_at_startup=True, timeout=60),
        cron(task_timeout, second=5, unique=True, run_at_startup=True, timeout=300),
        cron(dead_letter_alert, second=10, unique=True, run_at_startup=True, timeout=60),
        cron(outbox_retention, minute=17, second=30, unique=True, run_at_startup=True,
             timeout=1800),
        cron(broadcast_timeout, second=EVERY_15_S, unique=True, run_at_startup=True,
             timeout=120),
        cron(data_retention, minute=47, second=30, unique=True, run_at_startup=True,
             timeout=1800),
    ]
    on_startup = startup
    on_shutdown = shutdown
    redis_settings = arq_redis_settings(load_settings())
    queue_name = "mesh:cron"
    handle_signals = True
    job_completion_wait = 10
    # Results are only for the log; a failed run is simply tried again next tick.
    keep_result = 60
    max_tries = 1
    health_check_interval = 30
