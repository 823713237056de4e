"""What every worker process sets up: logging, Sentry, tracing, its own /metrics port,
and arq's Redis connection with retries (a Redis restart must not kill a worker)."""

from __future__ import annotations

import asyncio
import logging

from arq.connections import RedisSettings
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.platform.settings import Settings

log = logging.getLogger("mesh.worker")

_started_metrics: set[int] = set()


def setup_process(settings: Settings, process: str) -> None:
    try:
        from app.platform.observability import init_sentry, setup_logging

        setup_logging(settings)
        init_sentry(settings, process)
    except ImportError:  # observability not installed in a trimmed deployment
        logging.basicConfig(level=settings.log_level)
    from app.platform import tracing

    tracing.setup(process)  # only with OTEL_EXPORTER_OTLP_ENDPOINT set (ADR 042)
    if settings.metrics_port and settings.metrics_port not in _started_metrics:
        from prometheus_client import start_http_server

        start_http_server(settings.metrics_port, addr=settings.host)
        _started_metrics.add(settings.metrics_port)
        log.info("%s: metrics on http://%s:%d/metrics", process, settings.host,
                 settings.metrics_port)


def arq_redis_settings(settings: Settings) -> RedisSettings:
    base = RedisSettings.from_dsn(settings.redis_url)
    base.conn_retries = 30
    base.conn_retry_delay = 1
    base.retry_on_timeout = True
    base.retry_on_error = [RedisConnectionError, RedisTimeoutError, OSError]
    # ~60 s of retries with capped backoff: longer than a Redis restart.
    base.retry = Retry(ExponentialBackoff(cap=2.0, base=0.05), retries=40)
    return base


def use_fast_event_loop() -> None:
    """uvloop's event loop for the next ``asyncio.run`` when it is installed
    (uvicorn[standard] brings it on Linux; the web process already runs on it).
    The relay and push worker spend their low-rate CPU in the event loop
    itself and in socket writes — claim, produce, fetch, pipeline, commit per
    batch of one or two events — and uvloop's loop and transports are C
    (ADR 027: measured). Without uvloop the standard loop runs, as before."""
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
