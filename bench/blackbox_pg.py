"""What a send costs Postgres, read from Postgres itself (bench/blackbox.py): which
indexes and foreign keys each table a send writes carries, how many of the counter
row's updates were HOT, and the plan of the gateway's create statement with
``EXPLAIN (ANALYZE, BUFFERS)`` (in a transaction rolled back)."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from bench.scenarios import pgbench

SEND_TABLES = pgbench.SEND_TABLES


@dataclass(frozen=True)
class TableFacts:
    table: str
    indexes: list[str]
    foreign_keys: int
    fillfactor: str


@dataclass(frozen=True)
class UpdateCounts:
    updates: int
    hot: int


async def tables(url: str) -> list[TableFacts]:
    conn = await asyncpg.connect(url)
    try:
        out = []
        for table in SEND_TABLES:
            indexes = [r["indexname"] for r in await conn.fetch(
                "SELECT indexname FROM pg_indexes WHERE tablename = $1 ORDER BY indexname", table)]
            fks = await conn.fetchval(
                "SELECT count(*) FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'f'",
                table)
            options = await conn.fetchval(
                "SELECT reloptions FROM pg_class WHERE oid = $1::regclass", table) or []
            fill = next((o.split("=", 1)[1] for o in options if o.startswith("fillfactor=")), "100")
            out.append(TableFacts(table, indexes, int(fks), fill))
        return out
    finally:
        await conn.close()


async def counter_updates(url: str) -> UpdateCounts:
    """The counter rows' updates so far (``agents``), and how many were HOT. Other
    backends report theirs within about a second, so a difference of two readings
    is a ratio to read, not an exact count."""
    conn = await asyncpg.connect(url)
    try:
        row = await conn.fetchrow(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'agents'")
        return UpdateCounts(int(row["n_tup_upd"]), int(row["n_tup_hot_upd"]))
    finally:
        await conn.close()


@dataclass(frozen=True)
class Maintenance:
    """Autovacuum and autoanalyze runs finished per send table (counters from
    pg_stat_user_tables, so a run still going when read is not in them)."""

    vacuums: dict[str, int]
    analyzes: dict[str, int]

    def __sub__(self, before: Maintenance) -> Maintenance:
        return Maintenance({t: n - before.vacuums.get(t, 0) for t, n in self.vacuums.items()},
                           {t: n - before.analyzes.get(t, 0) for t, n in self.analyzes.items()})


async def maintenance(url: str) -> Maintenance:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT relname, autovacuum_count, autoanalyze_count FROM pg_stat_user_tables "
            "WHERE relname = ANY($1::text[])", list(SEND_TABLES))
        return Maintenance({r["relname"]: int(r["autovacuum_count"]) for r in rows},
                           {r["relname"]: int(r["autoanalyze_count"]) for r in rows})
    finally:
        await conn.close()


def _create_sql(n_senders: int, n_recipients: int) -> str:
    """The real write set's statement with its pgbench variables given values."""
    text = pgbench.script(n_senders, n_recipients, "real")
    sql = "\n".join(line for line in text.splitlines() if not line.startswith("\\"))
    return sql.replace(":id", "424242424242").replace(":s", "0").replace(":r", "0").rstrip("; \n")


async def explain_create(url: str, n_senders: int, n_recipients: int) -> str:
    """The create statement's plan with timings and buffers, for one task (written
    and rolled back; the pgbench agents must exist: :func:`pgbench.prepare`)."""
    conn = await asyncpg.connect(url)
    try:
        tx = conn.transaction()
        await tx.start()
        try:
            rows = await conn.fetch("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) "
                                    + _create_sql(n_senders, n_recipients))
        finally:
            await tx.rollback()
        return "\n".join(r[0] for r in rows)
    finally:
        await conn.close()
