"""Apply the versioned SQL files in ``app/migrations`` exactly once each.

Run as ``python -m app.platform.migrate`` (the Procfile ``release`` process). Several
processes may run it at once: an advisory lock serialises them, and a version
already recorded in ``schema_migrations`` is skipped, so re-running is a no-op.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from app.platform.settings import Settings, load_settings

log = logging.getLogger("mesh.migrate")

MIGRATIONS_DIR = Path(__file__).parents[1] / "migrations"
_LOCK_KEY = 0x6D657368  # "mesh"


def migration_files() -> list[tuple[int, Path]]:
    files = []
    for path in sorted(MIGRATIONS_DIR.glob("*.sql")):
        version = int(path.name.split("_", 1)[0])
        files.append((version, path))
    return files


async def migrate(database_url: str) -> list[int]:
    """Apply pending migrations; return the versions applied now."""
    conn = await asyncpg.connect(database_url)
    applied: list[int] = []
    try:
        await conn.execute("SELECT pg_advisory_lock($1)", _LOCK_KEY)
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}
        for version, path in migration_files():
            if version in done:
                continue
            async with conn.transaction():
                await conn.execute(path.read_text())
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                    version, path.name,
                )
            applied.append(version)
            log.info("applied migration %s", path.name)
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)
        await conn.close()
    return applied


async def ensure_database(database_url: str) -> None:
    """Create the target database if the server lacks it (embedded stack, tests)."""
    try:
        conn = await asyncpg.connect(database_url)
    except asyncpg.InvalidCatalogNameError:
        url = urlsplit(database_url)
        dbname = url.path.lstrip("/")
        admin = await asyncpg.connect(urlunsplit(url._replace(path="/postgres")))
        try:
            await admin.execute(f'CREATE DATABASE "{dbname}"')
        except asyncpg.DuplicateDatabaseError:
            pass
        finally:
            await admin.close()
    else:
        await conn.close()


def main(settings: Settings | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings = settings or load_settings()
    asyncio.run(ensure_database(settings.database_url))
    applied = asyncio.run(migrate(settings.database_url))
    print(f"migrations: {len(applied)} applied" + (f" ({applied})" if applied else " (up to date)"))


if __name__ == "__main__":
    main()
