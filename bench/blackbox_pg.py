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


@dataclass(frozen=True)
class Upkeep:
    """What Postgres did beside the statements, as counters (differences of two
    readings are a level's): the counter rows' updates (``agents``) and how many
    were HOT, autovacuum and autoanalyze runs finished per send table
    (pg_stat_user_tables), the client backends' own buffer writes, evictions
    and reads (pg_stat_io: a backend that must write a dirty page before it can
    read another waits for it), checkpoints, and WAL written. Other backends report
    theirs within about a second, so these are approximate."""

    vacuums: dict[str, int]
    analyzes: dict[str, int]
    updates: int = 0
    hot_updates: int = 0
    backend_writes: int = 0
    evictions: int = 0
    reads: int = 0
    checkpoints: int = 0
    wal_bytes: int = 0

    def __sub__(self, before: Upkeep) -> Upkeep:
        return Upkeep({t: n - before.vacuums.get(t, 0) for t, n in self.vacuums.items()},
                      {t: n - before.analyzes.get(t, 0) for t, n in self.analyzes.items()},
                      self.updates - before.updates, self.hot_updates - before.hot_updates,
                      self.backend_writes - before.backend_writes,
                      self.evictions - before.evictions, self.reads - before.reads,
                      self.checkpoints - before.checkpoints, self.wal_bytes - before.wal_bytes)


async def upkeep(url: str) -> Upkeep:
    conn = await asyncpg.connect(url)
    try:
        tables = await conn.fetch(
            "SELECT relname, autovacuum_count, autoanalyze_count, n_tup_upd, n_tup_hot_upd "
            "FROM pg_stat_user_tables "
            "WHERE relname = ANY($1::text[])", list(SEND_TABLES))
        io = await conn.fetchrow(
            "SELECT coalesce(sum(writes), 0) AS writes, coalesce(sum(evictions), 0) AS evictions, "
            "coalesce(sum(reads), 0) AS reads FROM pg_stat_io "
            "WHERE backend_type = 'client backend' AND object = 'relation'")
        checkpoints = await conn.fetchval("SELECT num_timed + num_requested FROM pg_stat_checkpointer")
        wal = await conn.fetchval("SELECT wal_bytes FROM pg_stat_wal")
        agents = next(r for r in tables if r["relname"] == "agents")
        return Upkeep({r["relname"]: int(r["autovacuum_count"]) for r in tables},
                      {r["relname"]: int(r["autoanalyze_count"]) for r in tables},
                      int(agents["n_tup_upd"]), int(agents["n_tup_hot_upd"]),
                      int(io["writes"]), int(io["evictions"]), int(io["reads"]),
                      int(checkpoints), int(wal))
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
