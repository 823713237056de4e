"""Work counted at the services while the bench's load runs (ADR 024).

* Postgres: ``pg_stat_statements`` (the embedded server preloads it for the bench;
  :func:`tracking` turns it to ``none`` at once and :class:`PgStatements` to ``top``
  only for the counted run, resetting it first). Tracking is switched with ALTER SYSTEM + reload, because a
  ``-c`` option on the server's command line would win over ALTER SYSTEM.
* Redis: the delta of ``INFO commandstats``.
* Kafka: the broker's own request counters (JMX ``RequestMetrics``/``RequestsPerSec``
  per request type and ``MessagesInPerSec``), read by ``bench/jmx/KafkaRequests.java``
  over the JMX port the bench's broker opens on 127.0.0.1.

The bench's own queries name a column :data:`BENCH_TAG` (pg_stat_statements keeps
aliases in its text but drops comments) and are left out of the counts.
"""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import redis.asyncio as aioredis

BENCH_TAG = "bench_probe"
# What the bench's Postgres preloads (off until a counted run): devstack passes these.
PG_SETTINGS = {"shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.max": "5000"}
JMX_TOOL = Path(__file__).resolve().parent / "jmx" / "KafkaRequests.java"


# --- Postgres ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Statement:
    query: str
    calls: int
    total_ms: float
    rows: int


@dataclass(frozen=True)
class PgCounts:
    statements: list[Statement]

    @property
    def calls(self) -> int:
        return sum(s.calls for s in self.statements)

    def calls_of(self, *prefixes: str) -> int:
        return sum(s.calls for s in self.statements
                   if s.query.lstrip().upper().startswith(prefixes))


def is_bench_query(query: str) -> bool:
    q = query.lstrip()
    return BENCH_TAG in q or "pg_stat_statements" in q \
        or q.upper().startswith(("ALTER SYSTEM", "SELECT PG_RELOAD_CONF"))


async def tracking(conn: asyncpg.Connection, value: str) -> None:
    """``pg_stat_statements.track`` for every session: ``none`` or ``top``."""
    await conn.execute(f"ALTER SYSTEM SET pg_stat_statements.track = '{value}'")
    await conn.execute("SELECT pg_reload_conf()")
    # Backends re-read the file at their next command; give the idle ones a moment.
    await asyncio.sleep(0.3)


async def tracking_off(database_url: str) -> None:
    conn = await asyncpg.connect(database_url, statement_cache_size=0)
    try:
        await tracking(conn, "none")
    finally:
        await conn.close()


class PgStatements:
    """``async with PgStatements(url) as pg: await pg.reset(); ...; counts = await pg.read()``"""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self.conn: asyncpg.Connection | None = None

    async def __aenter__(self) -> PgStatements:
        self.conn = await asyncpg.connect(self.database_url, statement_cache_size=0)
        await self.conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        await tracking(self.conn, "top")
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.conn is not None
        try:
            await tracking(self.conn, "none")
        finally:
            await self.conn.close()

    async def reset(self) -> None:
        assert self.conn is not None
        await self.conn.execute("SELECT pg_stat_statements_reset()")

    async def read(self) -> PgCounts:
        assert self.conn is not None
        rows = await self.conn.fetch(
            "SELECT query, sum(calls)::bigint AS calls, "
            "sum(total_exec_time) AS total_ms, sum(rows)::bigint AS rows "
            "FROM pg_stat_statements GROUP BY query")
        return PgCounts(sorted(
            (Statement(r["query"], int(r["calls"]), float(r["total_ms"]), int(r["rows"]))
             for r in rows if not is_bench_query(r["query"])), key=lambda s: -s.calls))


# --- Redis ------------------------------------------------------------------------------

def parse_commandstats(info: dict[str, object]) -> dict[str, tuple[int, float]]:
    """``INFO commandstats`` as redis-py returns it → {command: (calls, usec)}."""
    out = {}
    for key, value in info.items():
        if key.startswith("cmdstat_") and isinstance(value, dict):
            out[key[len("cmdstat_"):]] = (int(value.get("calls", 0)), float(value.get("usec", 0)))
    return out


def delta_commands(before: dict[str, tuple[int, float]],
                   after: dict[str, tuple[int, float]]) -> dict[str, tuple[int, float]]:
    out = {}
    for cmd, (calls, usec) in after.items():
        c0, u0 = before.get(cmd, (0, 0.0))
        if calls - c0 > 0 and cmd != "info":   # our own INFO calls
            out[cmd] = (calls - c0, usec - u0)
    return dict(sorted(out.items(), key=lambda kv: -kv[1][0]))


async def redis_commandstats(url: str) -> dict[str, tuple[int, float]]:
    client = aioredis.from_url(url)
    try:
        return parse_commandstats(await client.info("commandstats"))
    finally:
        await client.aclose()


# --- Kafka ------------------------------------------------------------------------------

def parse_counts_line(line: str) -> dict[str, int]:
    """``Produce=12 Fetch=3 messages_in=40`` → a dict."""
    out = {}
    for part in line.split():
        key, _, value = part.partition("=")
        if value.isdigit():
            out[key] = int(value)
    return out


def delta_counts(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    out = {k: v - before.get(k, 0) for k, v in after.items()}
    return dict(sorted(((k, v) for k, v in out.items() if v > 0), key=lambda kv: -kv[1]))


class KafkaJmx:
    """A long-lived ``java KafkaRequests.java`` (compiled once, ~2 s): each
    :meth:`snapshot` is then one JMX round trip, so the counted window is exact."""

    def __init__(self, jmx_port: int) -> None:
        self.jmx_port = jmx_port
        self.proc: asyncio.subprocess.Process | None = None

    @staticmethod
    def available() -> str | None:
        """None, or why the broker's counters cannot be read."""
        if shutil.which("java") is None:
            return "no `java` on PATH"
        return None

    async def start(self, timeout: float = 60.0) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            "java", "-XX:TieredStopAtLevel=1", "-Xmx64m", str(JMX_TOOL), f"127.0.0.1:{self.jmx_port}",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
        if line.strip() != b"ready":
            err = b""
            if self.proc.stderr is not None:
                err = await asyncio.wait_for(self.proc.stderr.read(), 5)
            raise RuntimeError(f"KafkaRequests.java: {(line + err).decode(errors='replace')[-1500:]}")

    async def snapshot(self) -> dict[str, int]:
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(b"\n")
        await self.proc.stdin.drain()
        return parse_counts_line((await asyncio.wait_for(self.proc.stdout.readline(), 30)).decode())

    async def close(self) -> None:
        if self.proc is None:
            return
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 10)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
