"""The relay's batch path (ADR 022): the claim walks the pending index in id order
whatever the statistics say, overlapping batches publish in claim order, a batch
claimed ahead is given back untouched when the bus refuses the one before, and
the Kafka publisher's per-partition batches keep each key's partition and order."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.partitioner import DefaultPartitioner

from app.platform.db import create_pool
from app.platform.settings import Settings
from app.store import outbox as outbox_store
from app.store.events import WAKEUP_CHANNEL, relay_wakeup_message
from devstack.process import free_port
from devstack.redis import Redis as RedisServer
from tests.support.isolated import (
    bus_options,
    driven_relay,
    isolated_settings,
    outbox_counts,
    wait_until,
)
from workers import relay as relay_worker
from workers import relay_claims
from workers.bus import BusOptions
from workers.runtime import opened


def isolated(settings: Settings, uniq: str, **extra: object) -> Settings:
    return settings.model_copy(update={"bus_topic": f"t-{uniq}", "push_group": f"g-{uniq}",
                                       **extra})


async def insert_rows(db, topic: str, n: int, keys: int) -> None:
    await db.execute(
        "INSERT INTO outbox_events (topic, key, payload) "
        "SELECT $1, 'agent-' || (i % $3), jsonb_build_object('seq', i) "
        "FROM generate_series(1, $2) i", topic, n, keys)


async def test_the_claim_walks_the_pending_index_in_order_after_a_burst(
        migrated: Settings, db, uniq: str) -> None:
    """Right after a burst of inserts the statistics are stale; the claim must
    still stop after its LIMIT instead of joining and sorting every pending row."""
    topic = f"t-{uniq}"
    await insert_rows(db, topic, 20_000, 16)
    async with db.acquire() as conn:
        await outbox_store.begin_claim(conn)  # the relay's own opening of a claim
        try:
            plan = "\n".join(r[0] for r in await conn.fetch(
                "EXPLAIN (ANALYZE, COSTS OFF) " + outbox_store.CLAIM_SQL, 500, topic))
            assert "Index Scan using outbox_pending_idx" in plan, plan
            assert "Sort" not in plan and "Bitmap" not in plan, plan
            assert await conn.fetchval("SHOW synchronous_commit") == "off"
        finally:
            await outbox_store.rollback(conn)
    await db.execute("DELETE FROM outbox_events WHERE topic = $1", topic)


async def test_the_claim_is_planned_once_per_connection(migrated: Settings, db,
                                                       uniq: str) -> None:
    """The plan cache chose a plan of its own for each claim's values, planned anew
    every batch; the claim's transaction asks for the one generic plan, which is
    the ordered walk of the pending index the test above checks."""
    settings = isolated(migrated, uniq)
    try:
        async with driven_relay(settings) as (relay, _):
            for n in (1, 3, 2, 5):
                await insert_rows(db, settings.bus_topic, n, 2)
                assert await relay.relay_batch() == n
            assert relay.claim_connection is not None
            plans = await relay.claim_connection.fetchrow(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                "WHERE statement = $1", outbox_store.CLAIM_SQL)
        assert plans is not None
        assert (plans["generic_plans"], plans["custom_plans"]) == (4, 0)
    finally:
        await db.execute("DELETE FROM outbox_events WHERE topic = $1", settings.bus_topic)


async def test_a_batch_is_two_round_trips_and_its_marks_are_committed(
        migrated: Settings, db, uniq: str) -> None:
    """At a trickle every event pays a whole claim (ADR 027): the claim, then the
    sent mark with the COMMIT and the next claim's BEGIN with its settings (ADR 062)
    — and the marks must be committed, not left in the transaction begun after them."""
    settings = isolated(migrated, uniq)
    sent: list[str] = []
    async with driven_relay(settings) as (relay, _):
        # A first batch connects, begins and prepares (asyncpg's type introspection).
        await insert_rows(db, settings.bus_topic, 1, 1)
        assert await relay.relay_batch() == 1
        assert relay.claim_connection is not None
        relay.claim_connection.add_query_logger(lambda q: sent.append(" ".join(q.query.split())))
        await insert_rows(db, settings.bus_topic, 3, 2)
        assert await relay.relay_batch() == 3
        await asyncio.sleep(0)  # asyncpg calls its query loggers with call_soon
        assert len(sent) == 2, sent
        assert sent[0].startswith("SELECT o.id"), sent
        assert sent[1].startswith("SELECT outbox_mark_sent("), sent
        assert "; COMMIT; BEGIN;" in sent[1], sent
        sent.clear()
        assert await relay.relay_batch() == 0  # nothing due: the claim, ROLLBACK; BEGIN
        await asyncio.sleep(0)
        assert len(sent) == 2 and sent[1].startswith("ROLLBACK; BEGIN;"), sent
    rows = await db.fetch("SELECT status, sent_at IS NOT NULL AS dated FROM outbox_events "
                          "WHERE topic = $1", settings.bus_topic)
    assert [(r["status"], r["dated"]) for r in rows] == [("sent", True)] * 4
    await db.execute("DELETE FROM outbox_events WHERE topic = $1", settings.bus_topic)


async def test_between_batches_the_begun_transaction_holds_nothing_and_ages_nothing(
        migrated: Settings, db, uniq: str) -> None:
    """The relay's own connection waits with its next claim's transaction begun:
    it must hold no transaction id or snapshot (VACUUM waits for neither), and what
    the claim compares and writes is its statements' time, not the BEGIN's — a row
    that comes due after the BEGIN is claimed, and dated after it was written."""
    settings = isolated(migrated, uniq)
    try:
        async with driven_relay(settings) as (relay, _):
            await insert_rows(db, settings.bus_topic, 1, 1)
            assert await relay.relay_batch() == 1
            assert relay.claim_connection is not None
            pid = relay.claim_connection.get_server_pid()
            waiting = await db.fetchrow(
                "SELECT state, backend_xid, backend_xmin, xact_start, application_name "
                "FROM pg_stat_activity WHERE pid = $1", pid)
            assert waiting is not None
            assert (waiting["state"], waiting["backend_xid"], waiting["backend_xmin"]) == (
                "idle in transaction", None, None)
            assert waiting["application_name"] == relay_claims.CLAIMS_APPLICATION_NAME
            # Due after the waiting transaction began (and written after it).
            written = await db.fetchval(
                "INSERT INTO outbox_events (topic, key, payload, next_attempt_at) "
                "VALUES ($1, 'k', '{}', clock_timestamp()) RETURNING next_attempt_at",
                settings.bus_topic)
            assert written > waiting["xact_start"]
            assert await relay.relay_batch() == 1
            sent_at = await db.fetchval(
                "SELECT sent_at FROM outbox_events WHERE topic = $1 AND key = 'k'",
                settings.bus_topic)
            assert sent_at > written
        gone = await db.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid)
        assert gone == 0  # stop closes the connection, and the begun transaction with it
    finally:
        await db.execute("DELETE FROM outbox_events WHERE topic = $1", settings.bus_topic)


async def test_overlapping_batches_publish_every_row_once_in_order_per_key(
        migrated: Settings, db, uniq: str) -> None:
    settings = isolated(migrated, uniq, relay_batch_size=40)
    n = 1000
    await insert_rows(db, settings.bus_topic, n, 7)
    async with driven_relay(settings) as (relay, rt):
        subscriber = await rt.subscriber(settings.push_group, "count")
        assert await relay.drain() == n
        assert relay.batches == n // 40
        statuses = dict(await db.fetch("SELECT status, count(*) FROM outbox_events "
                                       "WHERE topic = $1 GROUP BY status", settings.bus_topic))
        assert statuses == {"sent": n}
        by_key: dict[str, list[int]] = {}
        received = 0
        while received < n:
            batch = await subscriber.fetch(1000, 5.0)
            assert batch, f"the bus went quiet after {received} of {n} records"
            for d in batch:
                by_key.setdefault(d.key, []).append(json.loads(d.value)["seq"])
            received += len(batch)
            await subscriber.commit(batch)
    assert sum(map(len, by_key.values())) == n
    for key, seqs in by_key.items():
        assert seqs == sorted(set(seqs)), f"{key}: out of order or twice: {seqs[:20]}"
        assert len(seqs) == len([i for i in range(1, n + 1) if f"agent-{i % 7}" == key])


async def test_a_batch_claimed_ahead_is_given_back_when_the_bus_refuses(
        migrated: Settings, db, uniq: str, tmp_path) -> None:
    """The first batch fails (bus gone): only its rows spend an attempt; the
    batch claimed meanwhile is rolled back, pending and untried."""
    bus_redis = RedisServer(tmp_path / "bus", free_port(), persist=False)
    bus_redis.start()
    settings = isolated(migrated, uniq, bus="redis", redis_url=bus_redis.url,
                        relay_batch_size=10, relay_retry_base_seconds=60.0)
    await insert_rows(db, settings.bus_topic, 30, 3)
    try:
        async with driven_relay(settings, BusOptions(publish_timeout=0.5, connect_timeout=2)
                                ) as (relay, _):
            bus_redis.stop()
            assert await relay.drain() == 10
            assert not relay.bus_healthy
    finally:
        with contextlib.suppress(Exception):
            bus_redis.stop()
    rows = await db.fetch("SELECT status, attempts FROM outbox_events WHERE topic = $1 "
                          "ORDER BY id", settings.bus_topic)
    assert [(r["status"], r["attempts"]) for r in rows] == \
        [("pending", 1)] * 10 + [("pending", 0)] * 20
    # Nothing is left locked: the given-back rows are claimable at once.
    async with db.acquire() as conn, conn.transaction():
        claimed = await outbox_store.claim(conn, 100, settings.bus_topic)
    assert len(claimed) == 20


async def test_kafka_batches_keep_the_default_partition_and_order_of_each_key(
        migrated: Settings, uniq: str) -> None:
    """Big enough that a partition's records span several record batches."""
    if migrated.bus_kind != "kafka":
        pytest.skip("Kafka only")
    settings = isolated(migrated, uniq)
    keys = [f"agent-{k}@x" for k in range(5)]
    records = [(keys[i % 5], json.dumps({"i": i, "pad": "x" * 2000}).encode())
               for i in range(600)]
    async with opened(settings) as rt:
        publisher = await rt.publisher()
        assert await publisher.publish_batch(records) == [None] * len(records)
    consumer = AIOKafkaConsumer(settings.bus_topic, bootstrap_servers=settings.kafka_bootstrap,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = sorted(consumer.partitions_for_topic(settings.bus_topic) or [])
        got: dict[str, list[tuple[int, int]]] = {}
        while sum(map(len, got.values())) < len(records):
            batches = await consumer.getmany(timeout_ms=5000)
            assert batches, "Kafka went quiet before every record arrived"
            for tp, recs in batches.items():
                for rec in recs:
                    got.setdefault(rec.key.decode(), []).append(
                        (tp.partition, json.loads(rec.value)["i"]))
    finally:
        await consumer.stop()
    for key in keys:
        expected = DefaultPartitioner()(key.encode(), partitions, partitions)
        assert {p for p, _ in got[key]} == {expected}
        assert [i for _, i in got[key]] == [i for i, (k, _) in enumerate(records) if k == key]


@contextlib.asynccontextmanager
async def lingering_relay(migrated: Settings, linger_ms: float) -> AsyncIterator[
        tuple[relay_worker.Relay, list[float], Callable[..., Awaitable[None]],
              Callable[[], Awaitable[bool]]]]:
    """A relay with the given linger and no sweep to speak of, whose clock is the
    test's (``now[0]``): "far apart" needs no sleeping. Yields (relay, now, commit,
    all_sent); ``commit()`` inserts one row and NOTIFYs, as a writer without a
    Redis waker does (``commit(n)``: a wake-up that announces n events)."""
    settings = await isolated_settings(migrated, relay_linger_ms=linger_ms,
                                       relay_sweep_seconds=3600.0)
    now = [100.0]
    pool = await create_pool(settings, min_size=1, max_size=4)
    try:
        async with opened(settings, bus_options=bus_options(settings)) as rt:
            relay = relay_worker.Relay(settings, pool, await rt.publisher(),
                                       clock=lambda: now[0])
            await relay.start()
            # A NOTIFY sent before the relay's LISTEN is not heard, and the tests
            # count what the relay heard.
            await wait_until(lambda: pool.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND query = $1", f'LISTEN "{WAKEUP_CHANNEL}"'),
                "the relay's LISTEN")

            async def commit(announce: int | None = None) -> None:
                async with pool.acquire() as conn, conn.transaction():
                    await insert_rows(conn, settings.bus_topic, 1, 1)
                    if announce is None:
                        await outbox_store.wake_relay(conn)
                    else:  # a wake-up that announces ``announce`` events
                        await conn.execute("SELECT pg_notify($1, $2)", WAKEUP_CHANNEL,
                                           relay_wakeup_message(announce).decode())

            async def all_sent() -> bool:
                counts = await outbox_counts(pool)
                return counts["pending"] == 0 and counts["sent"] > 0

            try:
                yield relay, now, commit, all_sent
            finally:
                await relay.stop()
    finally:
        await pool.close()


async def test_the_relay_lingers_only_while_commits_come_closer_than_the_linger(
        migrated: Settings) -> None:
    """ADR 029: a wake-up that follows the previous one by more than the linger is
    relayed at once (at 20 msg/s, waiting would only add latency); one that follows
    it closely waits, so the next commit shares its claim, publish and mark. The
    commits' NOTIFYs are real."""
    async with lingering_relay(migrated, 2000.0) as (relay, now, commit, all_sent):
        for t in (100.0, 200.0, 300.0):  # a minute or more apart: never waits
            now[0] = t
            await commit()
            await wait_until(all_sent, "a lone commit relayed", timeout=20)
        assert relay.lingers == 0
        batches = relay.batches
        now[0] = 300.5  # half a second after the last: within the 2 s linger
        await commit()
        await wait_until(lambda: relay.lingers == 1, "the relay lingering")
        now[0] = 300.6
        await commit()  # committed while it lingers: the same batch
        await wait_until(all_sent, "both relayed", timeout=20)
        assert relay.batches == batches + 1
        assert (await outbox_counts(relay.pool))["sent"] == 5


async def test_commits_about_a_linger_apart_are_claimed_when_the_next_is_noticed(
        migrated: Settings) -> None:
    """ADR 060: when the last gap was at least half the linger, the relay waits for
    the next commit, not the whole linger. With a minute's linger, two commits share
    one batch long before the minute is over (the old whole-linger wait fails the
    20 s timeout)."""
    async with lingering_relay(migrated, 60_000.0) as (relay, now, commit, all_sent):
        for t in (100.0, 200.0):  # over a minute apart: never waits
            now[0] = t
            await commit()
            await wait_until(all_sent, "a lone commit relayed", timeout=20)
        assert relay.lingers == 0
        batches = relay.batches
        now[0] = 240.0  # 40 s after the last: within the minute, over half of it
        await commit()
        await wait_until(lambda: relay.lingers == 1, "the relay lingering")
        now[0] = 240.5
        await commit()  # noticed while it lingers: claimed at once, with the first
        await wait_until(all_sent, "both relayed before the linger ends", timeout=20)
        assert relay.batches == batches + 1 and relay.lingers_to_next == 1
        assert (await outbox_counts(relay.pool))["sent"] == 4


async def test_a_wake_up_that_announces_many_events_gets_the_whole_linger(
        migrated: Settings) -> None:
    """ADR 060: a round of many events (a web process's wake-up under load covers
    every commit since its last) says commits are close whatever the gap between
    wake-ups, so the relay lingers the whole time and its batch takes in what
    follows."""
    async with lingering_relay(migrated, 2000.0) as (relay, now, commit, all_sent):
        await commit()
        await wait_until(all_sent, "a lone commit relayed", timeout=20)
        batches = relay.batches
        now[0] = 101.5  # over half the 2 s linger after the last, but announcing five
        await commit(5)
        await wait_until(lambda: relay.lingers == 1, "the relay lingering")
        now[0] = 101.6
        await commit()  # noticed while it lingers: the linger goes on
        await wait_until(all_sent, "both relayed", timeout=20)
        assert relay.batches == batches + 1 and relay.lingers_to_next == 0


async def test_a_stop_during_the_linger_does_not_wait_for_the_sweep(
        migrated: Settings) -> None:
    """The loop clears its wake-up before each drain, so a stop that arrived while the
    relay lingered was cleared with it, and the relay then waited out a whole sweep
    (an hour here) before it saw the stop."""
    async with lingering_relay(migrated, 2000.0) as (relay, now, commit, all_sent):
        await commit()
        await wait_until(all_sent, "a lone commit relayed", timeout=20)
        now[0] = 100.5  # half a second later: within the 2 s linger, under half of it
        await commit()
        await wait_until(lambda: relay.lingers == 1, "the relay lingering")
        await asyncio.wait_for(relay.stop(), 30)  # a hang bound, not a timing
        assert relay.task is not None and relay.task.done()


def test_the_sent_mark_writes_only_integers_into_its_query() -> None:
    assert outbox_store._sent_sql([]) == "COMMIT"
    assert outbox_store._sent_sql([3, 10]) == "SELECT outbox_mark_sent('{3,10}'); COMMIT"
    with pytest.raises(ValueError):
        outbox_store._sent_sql(["1}'); DROP TABLE outbox_events; --"])  # type: ignore[list-item]
