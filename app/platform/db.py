"""Postgres connection pool with JSON codecs."""

from __future__ import annotations

import asyncpg

from app.platform import fastjson
from app.platform.settings import Settings


async def _init_connection(conn: asyncpg.Connection) -> None:
    # fastjson: orjson's speed, json's results (every jsonb value of a send passes here).
    for typ in ("json", "jsonb"):
        await conn.set_type_codec(typ, encoder=fastjson.dumps_text, decoder=fastjson.loads,
                                  schema="pg_catalog")


async def connect(url: str, application_name: str | None = None) -> asyncpg.Connection:
    """A connection of its own, set up as the pool's are; ``application_name``
    names it in ``pg_stat_activity``."""
    settings = {"application_name": application_name} if application_name else None
    conn = await asyncpg.connect(url, server_settings=settings)
    await _init_connection(conn)
    return conn


async def _no_reset(conn: asyncpg.Connection) -> None:
    """Pooled connections keep no session state (no LISTEN, advisory locks, SET or
    cursors outside a transaction — those use connections of their own), so
    asyncpg's default reset (four statements, one round trip per release) is
    pure cost on the hot path."""


async def create_pool(settings: Settings, *, min_size: int | None = None,
                      max_size: int | None = None) -> asyncpg.Pool:
    pool = await asyncpg.create_pool(
        settings.database_url,
        min_size=settings.db_pool_min if min_size is None else min_size,
        max_size=settings.db_pool_max if max_size is None else max_size,
        init=_init_connection,
        reset=_no_reset,
        # Statements are few and hot; the default cache is fine, but idle
        # connections are recycled so a restarted Postgres is picked up.
        max_inactive_connection_lifetime=60.0,
    )
    assert pool is not None
    return pool
