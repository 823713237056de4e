"""The embedded Postgres (make run, the tests, the bench) runs durable and without
pre-filling WAL segments."""

from __future__ import annotations

import asyncpg
import pytest

from devstack.stack import Stack


async def test_commits_are_flushed_and_new_wal_segments_are_not_zero_filled(
        stack: Stack, db: asyncpg.Pool) -> None:
    if stack.postgres is None:
        pytest.skip("Postgres is external (MESH_DATABASE_URL): its settings are its own")
    settings = {r["name"]: r["setting"] for r in await db.fetch(
        "SELECT name, setting FROM pg_settings WHERE name = ANY($1::text[])",
        ["fsync", "synchronous_commit", "wal_init_zero"])}
    # Zero-filling a fresh segment stalled every commit for 40-50 ms about once a
    # second under load; skipping it must not come with weaker commits.
    assert settings == {"fsync": "on", "synchronous_commit": "on", "wal_init_zero": "off"}
