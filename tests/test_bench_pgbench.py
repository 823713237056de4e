"""The bench's pgbench write sets write what their names say, on a real Postgres:
every transaction pgbench counts leaves its rows, and the recipients' counters
moved by exactly that many (so a ratio against them compares like with like)."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest

from app.platform.settings import Settings
from bench.scenarios import pgbench

# rows each committed transaction leaves, per table
WRITES = {
    "lean": {"tasks": 1, "task_messages": 0, "inbox_events": 1, "outbox_events": 1},
    "split": {"tasks": 1, "task_messages": 1, "inbox_events": 1, "outbox_events": 1},
    "real": {"tasks": 1, "task_messages": 1, "inbox_events": 1, "outbox_events": 1},
}
COUNTS = {
    "tasks": "SELECT count(*) FROM tasks WHERE task_id LIKE 't-pgb-%'",
    "task_messages": "SELECT count(*) FROM task_messages WHERE message_id LIKE 'm-pgb-%'",
    "inbox_events": f"SELECT count(*) FROM inbox_events WHERE agent_id LIKE '%@{pgbench.OWNER}'",
    "outbox_events": f"SELECT count(*) FROM outbox_events WHERE topic = '{pgbench.TOPIC}'",
}


@pytest.mark.parametrize("variant", pgbench.VARIANTS)
async def test_each_write_set_leaves_its_rows(iso: Settings, tmp_path: Path, variant: str) -> None:
    await pgbench.prepare(iso.database_url, 3)
    conn = await asyncpg.connect(iso.database_url)
    try:
        run = await pgbench.run(iso.database_url, tmp_path, clients=2, seconds=1, n_senders=5,
                                n_recipients=3, variant=variant)
        assert run.failed == 0 and run.transactions > 0, run.output[-1500:]
        for table, per_tx in WRITES[variant].items():
            assert await conn.fetchval(COUNTS[table]) == per_tx * run.transactions, table
        seqs = await conn.fetch(f"SELECT inbox_seq FROM agents WHERE agent_id LIKE '%@{pgbench.OWNER}'")
        assert sum(r["inbox_seq"] for r in seqs) == run.transactions
        # Every event took the next seq of its recipient: no gap, no repeat.
        gaps = await conn.fetchval(
            "SELECT count(*) FROM (SELECT seq, row_number() OVER (PARTITION BY agent_id ORDER BY seq) AS n "
            f"FROM inbox_events WHERE agent_id LIKE '%@{pgbench.OWNER}') x WHERE seq <> n")
        assert gaps == 0
        before = await conn.fetchval("SELECT now()")
        await pgbench.cleanup(iso.database_url)
        for table in WRITES[variant]:
            assert await conn.fetchval(COUNTS[table]) == 0, table
        # ... and vacuumed, so the next measurement does not pay for the dead rows.
        vacuumed = await conn.fetch(
            "SELECT relname FROM pg_stat_user_tables WHERE last_vacuum > $1", before)
        assert {r["relname"] for r in vacuumed} >= set(pgbench.SEND_TABLES)
    finally:
        await conn.close()


def test_unknown_write_set_is_refused() -> None:
    with pytest.raises(ValueError, match="one of split, lean, real"):
        pgbench.script(1, 1, "fast")


async def test_the_create_statement_is_explained_and_rolled_back(iso: Settings) -> None:
    from bench import blackbox_pg

    await pgbench.prepare(iso.database_url, 2)
    plan = await blackbox_pg.explain_create(iso.database_url, 5, 2)
    for node in ("Insert on tasks", "Insert on task_messages", "Insert on inbox_events",
                 "Insert on outbox_events", "Update on agents", "Buffers:"):
        assert node in plan, plan
    conn = await asyncpg.connect(iso.database_url)
    try:
        assert await conn.fetchval(COUNTS["tasks"]) == 0  # explained, not kept
    finally:
        await conn.close()
    facts = {t.table: t for t in await blackbox_pg.tables(iso.database_url)}
    assert list(facts) == list(blackbox_pg.SEND_TABLES)
    assert "tasks_pkey" in facts["tasks"].indexes and facts["task_messages"].foreign_keys >= 1
