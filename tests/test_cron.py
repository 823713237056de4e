"""The cron jobs (cron/jobs.py, cron/worker.py) against real Postgres, Redis and the bus.

Time is controlled, never waited for: each job takes ``now``, and the tests pass
an instant past the TTL instead of sleeping 90 s or 24 h. Every test runs in a
database of its own (tests/support/isolated.py), so counts are exact.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import pytest
import redis.asyncio as aioredis
import sentry_sdk
from prometheus_client import REGISTRY

from app.platform import db
from app.platform.observability import init_sentry
from app.platform.settings import Settings
from cron import jobs
from tests.support.isolated import (
    db_now,
    isolated_settings,
    outbox_counts,
    relay_pending,
    wait_until,
)
from tests.support.meshapi import AgentHandle, MeshFactory
from tests.support.procs import MeshProcess
from tests.support.sentry_sink import SentrySink, sentry_sink
from tests.support.servers import serve_app

SECRET_TEXT = "dead-letter body that must never reach an alert "


@pytest.fixture
async def mesh(iso: Settings) -> AsyncIterator[MeshFactory]:
    async with serve_app(iso) as url, MeshFactory.connect(url) as factory:
        yield factory


def timeouts() -> float:
    return REGISTRY.get_sample_value("agent_mesh_task_timeout_total") or 0.0


async def status_of(agent: AgentHandle) -> str:
    resp = await agent.get("/v1/mesh/me")
    assert resp.status_code == 200, resp.text
    return resp.json()["status"]  # type: ignore[no-any-return]


async def all_events(agent: AgentHandle) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    after = 0
    while True:
        page = await agent.inbox(after=after)
        events += page["events"]
        if not page["events"]:
            return events
        after = page["next_after"]


# --- heartbeat expiry ----------------------------------------------------------------

async def test_heartbeat_expiry_marks_silent_agents_inactive_and_leaves_draining(
        iso: Settings, pool: asyncpg.Pool, mesh: MeshFactory) -> None:
    owner = await mesh.owner()
    live, draining, never = await owner.agent("live"), await owner.agent("drain"), \
        await owner.agent("never")
    assert (await live.post("/v1/mesh/heartbeat")).status_code == 200
    assert (await draining.post("/v1/mesh/heartbeat")).status_code == 200
    assert (await draining.delete("/v1/mesh/online")).status_code in (200, 204)
    assert [await status_of(a) for a in (live, draining, never)] == \
        ["active", "draining", "inactive"]
    t0 = await db_now(pool)
    ttl = iso.heartbeat_ttl_seconds

    # Just inside the TTL: nothing happens.
    assert await jobs.expire_heartbeats(pool, iso, now=t0 + timedelta(seconds=ttl - 1)) == []
    assert await status_of(live) == "active"

    # Past it: the silent active agent goes inactive; draining stays draining.
    expired = await jobs.expire_heartbeats(pool, iso, now=t0 + timedelta(seconds=ttl + 1))
    assert expired == [live.agent_id]
    assert [await status_of(a) for a in (live, draining, never)] == \
        ["inactive", "draining", "inactive"]

    # Idempotent; and a heartbeat brings the agent back.
    assert await jobs.expire_heartbeats(pool, iso, now=t0 + timedelta(seconds=ttl + 1)) == []
    assert (await live.post("/v1/mesh/heartbeat")).status_code == 200
    assert await jobs.expire_heartbeats(pool, iso) == []  # the database clock: fresh
    assert await status_of(live) == "active"


# --- task activity timeout -----------------------------------------------------------

async def test_idle_tasks_fail_and_both_agents_get_task_timeout(
        iso: Settings, pool: asyncpg.Pool, mesh: MeshFactory) -> None:
    a, b = await mesh.pair()
    idle = await a.send(b.agent_id, "anyone there?")
    talked = await a.send(b.agent_id, "second task")
    assert (await b.post(f"/v1/mesh/tasks/{talked['task_id']}/status",
                         {"state": "working"})).status_code == 200
    done = await a.send(b.agent_id, "cancel me")
    assert (await a.post(f"/v1/mesh/tasks/{done['task_id']}/status",
                         {"state": "canceled"})).status_code == 200
    t0 = await db_now(pool)
    limit = iso.task_timeout_seconds
    before = timeouts()

    assert await jobs.time_out_tasks(pool, iso, now=t0 + timedelta(seconds=limit - 1)) == []
    moved = await jobs.time_out_tasks(pool, iso, now=t0 + timedelta(seconds=limit + 1))

    assert sorted(moved) == sorted([idle["task_id"], talked["task_id"]])
    assert timeouts() - before == 2
    for task, previous in ((idle, "submitted"), (talked, "working")):
        for agent in (a, b):
            got = (await agent.get(f"/v1/mesh/tasks/{task['task_id']}")).json()
            assert got["state"] == "failed"
            assert got["status_message"]["reason"] == "timeout"
            events = [e for e in await all_events(agent)
                      if e["type"] == "task.timeout" and e["task_id"] == task["task_id"]]
            assert len(events) == 1, events
            assert events[0]["payload"]["state"] == "failed"
            assert events[0]["payload"]["previous_state"] == previous
            assert events[0]["from_agent_id"] is None
    # The canceled task was left alone, and nothing happens twice.
    assert (await a.get(f"/v1/mesh/tasks/{done['task_id']}")).json()["state"] == "canceled"
    assert await jobs.time_out_tasks(pool, iso, now=t0 + timedelta(seconds=limit + 1)) == []
    assert timeouts() - before == 2
    assert len([e for e in await all_events(b) if e["type"] == "task.timeout"]) == 2


async def test_activity_keeps_a_task_alive(iso: Settings, pool: asyncpg.Pool,
                                           mesh: MeshFactory) -> None:
    a, b = await mesh.pair()
    task = await a.send(b.agent_id, "first")
    created = datetime.fromisoformat(task["updated_at"])
    await b.reply(task["task_id"], "still on it")  # refreshes updated_at
    replied = datetime.fromisoformat(
        (await a.get(f"/v1/mesh/tasks/{task['task_id']}")).json()["updated_at"])
    assert replied > created
    # Idle since creation by more than the limit, but not since the reply (halfway
    # between the two: the reply may follow the creation by well under a millisecond).
    now = created + timedelta(seconds=iso.task_timeout_seconds) + (replied - created) / 2
    assert await jobs.time_out_tasks(pool, iso, now=now) == []
    assert (await a.get(f"/v1/mesh/tasks/{task['task_id']}")).json()["state"] == "submitted"


# --- two cron runs at once -----------------------------------------------------------

async def test_two_concurrent_runs_never_double_act(
        iso: Settings, pool: asyncpg.Pool, mesh: MeshFactory) -> None:
    owner = await mesh.owner()
    agents = [await owner.agent(f"hb{i}") for i in range(12)]
    for agent in agents:
        assert (await agent.post("/v1/mesh/heartbeat")).status_code == 200
    a, b = await mesh.pair()
    tasks = [(await a.send(b.agent_id, f"t{i}"))["task_id"] for i in range(30)]
    await relay_pending(iso)  # every event so far: sent
    old_sent = (await outbox_counts(pool))["sent"]
    now = await db_now(pool) + timedelta(days=iso.outbox_retention_days, seconds=1)
    before = timeouts()

    # Two "processes": two pools, so the runs really overlap on separate connections.
    other = await db.create_pool(iso, min_size=1, max_size=6)
    try:
        hb = await asyncio.gather(*(jobs.expire_heartbeats(p, iso, now=now, batch=2)
                                    for p in (pool, other)))
        to = await asyncio.gather(*(jobs.time_out_tasks(p, iso, now=now, batch=4)
                                    for p in (pool, other)))
        pr = await asyncio.gather(*(jobs.prune_outbox(p, iso, now=now, batch=3)
                                    for p in (pool, other)))
    finally:
        await other.close()

    assert sorted(hb[0] + hb[1]) == sorted(x.agent_id for x in agents)  # each exactly once
    assert sorted(to[0] + to[1]) == sorted(tasks)
    assert timeouts() - before == len(tasks)
    # Exactly one task.timeout per task per agent, counted in the rows themselves.
    per_task = await pool.fetch(
        "SELECT task_id, agent_id, count(*) AS n FROM inbox_events WHERE type = 'task.timeout' "
        "GROUP BY task_id, agent_id")
    assert len(per_task) == 2 * len(tasks) and {r["n"] for r in per_task} == {1}
    assert pr[0]["deleted"] + pr[1]["deleted"] == old_sent
    assert (await outbox_counts(pool))["sent"] == 0
    # The timeouts' own events are still pending (no relay ran): never pruned.
    assert (await outbox_counts(pool))["pending"] == 2 * len(tasks)


# --- outbox retention ----------------------------------------------------------------

async def test_retention_deletes_only_old_sent_rows_in_batches(
        iso: Settings, pool: asyncpg.Pool, mesh: MeshFactory) -> None:
    a, b = await mesh.pair()
    task = await a.send(b.agent_id, "old 0")
    for i in range(1, 5):
        await a.reply(task["task_id"], f"old {i}")
    await relay_pending(iso)
    old = (await outbox_counts(pool))["sent"]
    t_mid = await db_now(pool)  # every "old" row was sent before this instant

    for i in range(3):
        await a.reply(task["task_id"], f"recent {i}")
    await relay_pending(iso)
    for _ in range(2):
        await a.reply(task["task_id"], SECRET_TEXT * 100)  # ~5 KB: over the small limit
    await relay_pending(iso, max_record_bytes=4096)
    for i in range(2):
        await a.reply(task["task_id"], f"pending {i}")  # no relay runs: stays pending
    before = await outbox_counts(pool)
    assert before == {"sent": old + 3, "failed": 2, "pending": 2}

    now = t_mid + timedelta(days=iso.outbox_retention_days)
    result = await jobs.prune_outbox(pool, iso, now=now, batch=2)

    assert result == {"deleted": old, "batches": old // 2 + 1}
    assert await outbox_counts(pool) == {"sent": 3, "failed": 2, "pending": 2}
    # A day later still nothing else is old enough; run again: nothing to do.
    assert (await jobs.prune_outbox(pool, iso, now=now, batch=2))["deleted"] == 0
    # The production clock (the database's): nothing is 7 days old.
    assert (await jobs.prune_outbox(pool, iso))["deleted"] == 0


# --- dead-letter alert ---------------------------------------------------------------

@pytest.fixture
def sentry_collector() -> Iterator[SentrySink]:
    with sentry_sink(project=7) as sink:
        yield sink


async def make_dead_letters(iso: Settings, pool: asyncpg.Pool, sender: AgentHandle,
                            task_id: str, n: int) -> None:
    for _ in range(n):
        await sender.reply(task_id, SECRET_TEXT * 100)
    await relay_pending(iso, max_record_bytes=4096)


async def test_dead_letter_alert_fires_once_per_new_dead_letters(
        iso: Settings, pool: asyncpg.Pool, mesh: MeshFactory, redis_client: aioredis.Redis,
        sentry_collector: SentrySink, caplog: pytest.LogCaptureFixture) -> None:
    sink = sentry_collector
    dsn = sink.dsn
    assert init_sentry(iso.model_copy(update={"sentry_dsn": dsn}), "cron")
    a, b = await mesh.pair()
    task = await a.send(b.agent_id, "hello")
    await relay_pending(iso)
    # Nothing dead yet: no alert.
    assert await jobs.alert_dead_letters(pool, redis_client, iso) == {"failed": 0, "new": 0}

    await make_dead_letters(iso, pool, a, task["task_id"], 2)
    with caplog.at_level(logging.WARNING, logger="mesh.cron"):
        first = await jobs.alert_dead_letters(pool, redis_client, iso)
        again = await jobs.alert_dead_letters(pool, redis_client, iso)
    assert first == {"failed": 2, "new": 2}
    assert again == {"failed": 2, "new": 0}
    warnings = [r.getMessage() for r in caplog.records if r.name == "mesh.cron"]
    assert len(warnings) == 1 and "2 new dead letter(s), 2 in total" in warnings[0]
    assert REGISTRY.get_sample_value("agent_mesh_outbox_failed_total") == 2

    # One more dead letter, two cron processes noticing it at once: one alert.
    await make_dead_letters(iso, pool, a, task["task_id"], 1)
    second_redis = aioredis.from_url(iso.redis_url)
    other = await db.create_pool(iso, min_size=1, max_size=2)
    try:
        both = await asyncio.gather(jobs.alert_dead_letters(pool, redis_client, iso),
                                    jobs.alert_dead_letters(other, second_redis, iso))
    finally:
        await other.close()
        await second_redis.aclose()
    assert sorted(r["new"] for r in both) == [0, 1]
    assert {r["failed"] for r in both} == {3}

    sentry_sdk.flush(timeout=5)
    await wait_until(lambda: len(sink.messages()) >= 2, "two Sentry events", 10)
    messages = sink.messages()
    assert len(messages) == 2, messages
    assert "2 new dead letter(s)" in messages[0] and "1 new dead letter(s)" in messages[1]
    raw = sink.raw()
    assert SECRET_TEXT.strip() not in raw  # counts only, never a payload


# --- gauges --------------------------------------------------------------------------

def lag(agent_id: str) -> float | None:
    return REGISTRY.get_sample_value("agent_mesh_consumer_lag", {"agent_id": agent_id})


async def test_consumer_lag_and_outbox_gauges(
        iso: Settings, pool: asyncpg.Pool, mesh: MeshFactory) -> None:
    a, b = await mesh.pair()
    task = await a.send(b.agent_id, "one")
    await a.reply(task["task_id"], "two")
    await a.reply(task["task_id"], "three")
    me_a, me_b = (await a.get("/v1/mesh/me")).json(), (await b.get("/v1/mesh/me")).json()
    expected_b = me_b["inbox_seq"] - me_b["acked_seq"]
    expected_a = me_a["inbox_seq"] - me_a["acked_seq"]
    assert expected_b > expected_a > 0  # friend.accepted for a; request + 3 for b

    # By default only the largest lag, no agent ids.
    result = await jobs.update_gauges(pool)
    assert result["max_lag"] == expected_b
    assert REGISTRY.get_sample_value("agent_mesh_consumer_lag_max") == expected_b
    assert lag(b.agent_id) is None and lag(a.agent_id) is None

    # Opted in (MESH_METRICS_AGENT_LABELS): one label per agent.
    result = await jobs.update_gauges(pool, per_agent=True)
    assert result["lagging"] == 2 and result["max_lag"] == expected_b
    assert lag(b.agent_id) == expected_b and lag(a.agent_id) == expected_a
    pending = (await outbox_counts(pool))["pending"]
    assert REGISTRY.get_sample_value("agent_mesh_outbox_pending_total") == pending > 0

    # Top N only: the agent furthest behind keeps its label, the other's is cleared.
    await jobs.update_gauges(pool, top_n=1, per_agent=True)
    assert lag(b.agent_id) == expected_b and lag(a.agent_id) is None

    # An agent that acks everything drops out of the gauge.
    assert (await b.post("/v1/mesh/inbox/ack", {"seq": me_b["inbox_seq"]})).status_code == 200
    await jobs.update_gauges(pool, per_agent=True)
    assert lag(b.agent_id) is None and lag(a.agent_id) == expected_a
    assert REGISTRY.get_sample_value("agent_mesh_consumer_lag_max") == expected_a


# --- two real cron processes ---------------------------------------------------------

@pytest.mark.faults
@pytest.mark.slow  # starts two real cron processes
async def test_two_cron_processes_start_coexist_and_act_once(
        migrated: Settings, sentry_collector: SentrySink) -> None:
    sink = sentry_collector
    dsn = sink.dsn
    # One-second limits so the processes' own clock (the database's) finds work.
    iso = await isolated_settings(migrated, heartbeat_ttl_seconds=1, task_timeout_seconds=1,
                                  sentry_dsn=dsn, sentry_environment="test")
    pool = await db.create_pool(iso, min_size=1, max_size=4)
    # DEBUG: the test counts arq's per-job lines, which cron logs only at DEBUG.
    procs = [MeshProcess("cron", iso, log_level="DEBUG"),
             MeshProcess("cron", iso, log_level="DEBUG")]
    try:
        async with serve_app(iso.model_copy(update={"sentry_dsn": None})) as url, \
                MeshFactory.connect(url) as mesh:
            a, b = await mesh.pair()
            for agent in (a, b):
                assert (await agent.post("/v1/mesh/heartbeat")).status_code == 200
            tasks = [(await a.send(b.agent_id, f"t{i}"))["task_id"] for i in range(10)]
            await make_dead_letters(iso, pool, a, tasks[0], 2)
        # Wait (on the database clock, not a fixed sleep) until all of it is past 1 s.
        await wait_until(lambda: pool.fetchval(
            "SELECT now() - greatest((SELECT max(updated_at) FROM tasks),"
            " (SELECT max(last_heartbeat_at) FROM agents)) > interval '1.1 seconds'"),
            "the seeded rows to be over a second old", 30)

        await asyncio.gather(*(p.start() for p in procs))
        # Both run every job at start-up, at the same time, on the same rows.
        async def all_done() -> bool:
            states = {r["state"] for r in await pool.fetch(
                "SELECT state FROM tasks WHERE task_id = ANY($1::text[])", tasks)}
            statuses = {r["status"] for r in await pool.fetch(
                "SELECT status FROM agents WHERE agent_id = ANY($1::text[])",
                [a.agent_id, b.agent_id])}
            alerts_done = sum(p.tail(200_000).count("← cron:dead_letter_alert ●") for p in procs)
            return states == {"failed"} and statuses == {"inactive"} and alerts_done >= 2

        await wait_until(all_done, "both processes' start-up runs", 60)
        assert all(p.proc is not None and p.proc.poll() is None for p in procs)  # coexisting

        codes = await asyncio.gather(*(p.terminate(timeout=30) for p in procs))
        assert codes == [0, 0], [p.tail() for p in procs]

        per_task = await pool.fetch(
            "SELECT task_id, agent_id, count(*) AS n FROM inbox_events "
            "WHERE type = 'task.timeout' GROUP BY task_id, agent_id")
        assert len(per_task) == 2 * len(tasks) and {r["n"] for r in per_task} == {1}
        # Sentry events are sent from the processes (flushed at exit): one alert in all.
        await wait_until(lambda: sink.messages(), "the alert at Sentry", 10)
        alerts = [m for m in sink.messages() if "dead letter" in m]
        assert len(alerts) == 1 and "2 new dead letter(s)" in alerts[0], alerts
    finally:
        for p in procs:
            p.stop_quietly()
        await pool.close()
