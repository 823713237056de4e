"""The delivery pipeline's parts against real services: relay batching, backoff
and dead letters, competing relays, poison events, long-poll wake-up, receipts,
and the metrics of this path."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import httpx
import pytest
from httpx_sse import aconnect_sse

from app.delivery import protocol
from app.platform.settings import Settings
from devstack.process import free_port
from devstack.redis import Redis as RedisServer
from tests.support.isolated import driven_relay, stream_holds, wait_until
from tests.support.meshapi import MeshFactory
from tests.support.pipeline import run_pipeline
from workers.bus import BusOptions


def isolated(settings: Settings, uniq: str, **extra: object) -> Settings:
    """Own topic and push group: this test's rows and records are its own."""
    return settings.model_copy(update={"bus_topic": f"t-{uniq}", "push_group": f"g-{uniq}",
                                       **extra})


async def outbox_by_status(db, topic: str) -> dict[str, int]:
    rows = await db.fetch("SELECT status, count(*) AS n FROM outbox_events WHERE topic = $1 "
                          "GROUP BY status", topic)
    return {r["status"]: r["n"] for r in rows}


async def until(predicate, timeout: float = 30.0, interval: float = 0.05):
    """Poll a condition that has no event to await (e.g. a database state)."""
    async with asyncio.timeout(timeout):
        while not (result := await predicate()):  # noqa: ASYNC110 - a row's state has no event
            await asyncio.sleep(interval)
        return result


# --- relay ----------------------------------------------------------------------------

async def test_relay_backs_off_then_dead_letters_when_the_bus_is_unreachable(
        migrated: Settings, db, uniq: str, tmp_path) -> None:
    """The bus (a Redis of this test's own) goes away: every attempt fails,
    attempts grow, next_attempt_at backs off base·2^attempts, and after max
    attempts the row is dead with its error."""
    bus_redis = RedisServer(tmp_path / "bus", free_port(), persist=False)
    bus_redis.start()
    settings = isolated(migrated, uniq, bus="redis", redis_url=bus_redis.url,
                        relay_retry_base_seconds=0.05, relay_max_attempts=3)
    async with driven_relay(settings, BusOptions(publish_timeout=0.5, connect_timeout=2)
                            ) as (relay, _):  # not started: this test drives its batches
        bus_redis.stop()
        row_id = await db.fetchval(
            "INSERT INTO outbox_events (topic, key, payload) VALUES ($1, 'x@y', '{\"seq\": 1}') "
            "RETURNING id", settings.bus_topic)
        seen_gaps = []
        for attempt in range(1, 4):
            await until(lambda: db.fetchval(
                "SELECT next_attempt_at <= now() FROM outbox_events WHERE id = $1", row_id))
            assert await relay.relay_batch() == 1
            row = await db.fetchrow("SELECT status, attempts, last_error, "
                                    "EXTRACT(EPOCH FROM next_attempt_at - now()) AS gap "
                                    "FROM outbox_events WHERE id = $1", row_id)
            assert row["attempts"] == attempt
            assert "BusUnavailable" in row["last_error"]
            seen_gaps.append(row["gap"])
            assert row["status"] == ("failed" if attempt == 3 else "pending")
        # base·2^(attempts-1): 0.05, 0.1 → strictly growing backoff
        assert seen_gaps[1] > seen_gaps[0]
        assert await relay.relay_batch() == 0  # dead letters are not claimed again


async def test_competing_relays_publish_each_row_once(migrated: Settings, db, uniq: str) -> None:
    settings = isolated(migrated, uniq, relay_batch_size=50)
    n = 1200
    await db.execute(
        "INSERT INTO outbox_events (topic, key, payload) "
        "SELECT $1, 'agent-' || (i % 7), jsonb_build_object('seq', i) FROM generate_series(1, $2) i",
        settings.bus_topic, n)
    async with contextlib.AsyncExitStack() as stack:
        # Two relays as two outbox processes build them (each its own pool and
        # publisher), driven by hand; and a bare subscriber to count the bus.
        relays, rts = zip(*[await stack.enter_async_context(driven_relay(settings))
                            for _ in range(2)], strict=True)
        subscriber = await rts[0].subscriber(settings.push_group, "count")
        totals = await asyncio.gather(*(r.drain() for r in relays))
        assert sum(totals) == n
        assert all(r.batches > 0 for r in relays), "both relays should have claimed batches"
        assert await outbox_by_status(db, settings.bus_topic) == {"sent": n}
        received: list[int] = []
        async with asyncio.timeout(60):
            while len(received) < n:
                batch = await subscriber.fetch(1000, 1.0)
                received += [json.loads(d.value)["seq"] for d in batch]
                await subscriber.commit(batch)
        assert sorted(received) == list(range(1, n + 1)), "a row was published twice or lost"


async def test_poison_event_is_dead_lettered_while_the_rest_flows(
        migrated: Settings, db, uniq: str) -> None:
    """An event the bus refuses (over its record size) fails at once with its
    error; the messages around it are delivered."""
    settings = isolated(migrated, uniq, bus_max_record_bytes=4096)
    async with run_pipeline(settings) as pipe, MeshFactory.connect(pipe.url) as mesh:
        a, b = await mesh.pair()
        await a.send(b.agent_id, "before")
        poison = await a.send(b.agent_id, "x" * 10_000)
        await a.send(b.agent_id, "after")
        dead = await until(lambda: db.fetchrow(
            "SELECT key, attempts, last_error FROM outbox_events WHERE topic = $1 "
            "AND status = 'failed'", settings.bus_topic))
        assert dead["key"] == b.agent_id
        assert "RecordRejected" in dead["last_error"] and "4096" in dead["last_error"]
        assert dead["attempts"] == 1  # never retried: it can never succeed
        # The stream still delivers every event in order: the dead one from Postgres.
        events = await read_sse(pipe.url, b.headers, count=4)
        assert [e["seq"] for e in events] == [1, 2, 3, 4]
        assert events[2]["task_id"] == poison["task_id"]
        assert await until(lambda: _no_pending(db, settings.bus_topic))


async def _no_pending(db, topic: str) -> bool:
    return (await outbox_by_status(db, topic)).get("pending", 0) == 0


async def read_sse(url: str, headers: dict[str, str], count: int,
                   after: int | None = None) -> list[dict]:
    events: list[dict] = []
    hdrs = dict(headers)
    if after is not None:
        hdrs["Last-Event-ID"] = str(after)
    async with httpx.AsyncClient(base_url=url, timeout=30) as client, \
            aconnect_sse(client, "GET", "/v1/mesh/inbox/stream", headers=hdrs) as source:
        async with asyncio.timeout(30):
            async for sse in source.aiter_sse():
                if not sse.data:  # a keep-alive, as httpx-sse reports it after an id
                    continue
                events.append(json.loads(sse.data))
                if len(events) == count:
                    break
    return events


# --- SSE resume -------------------------------------------------------------------------

async def test_sse_resumes_after_last_event_id_and_after_param_and_acked_cursor(mesh) -> None:
    a, b = await mesh.pair()
    for i in range(5):
        await a.send(b.agent_id, f"m{i}")
    url = str(mesh.http.base_url)
    first = await read_sse(url, b.headers, count=6)
    assert [e["seq"] for e in first] == [1, 2, 3, 4, 5, 6]
    resumed = await read_sse(url, b.headers, count=3, after=3)
    assert [e["seq"] for e in resumed] == [4, 5, 6]
    resp = await b.post("/v1/mesh/inbox/ack", {"seq": 5})
    assert resp.json()["acked_seq"] == 5
    assert [e["seq"] for e in await read_sse(url, b.headers, count=1)] == [6]
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        resp = await client.get("/v1/mesh/inbox/stream", headers={**b.headers,
                                                                  "Last-Event-ID": "nope"})
        assert resp.status_code == 422
        assert resp.headers["content-type"].startswith("application/problem+json")
        resp = await client.get("/v1/mesh/inbox/stream")
        assert resp.status_code == 401


async def test_sse_delivers_live_and_the_push_stream_still_holds_every_event(
        mesh, pipeline, redis_client) -> None:
    """Live events reach the stream from the commit's own notice (ADR 065), and the
    push worker still writes each of them to the agent's Redis stream, which a
    reconnecting stream resumes from."""
    a, b = await mesh.pair()
    listener = asyncio.create_task(read_sse(pipeline.url, b.headers, count=11))
    await asyncio.sleep(0)  # let it connect; events sent before would also arrive
    for i in range(10):
        await a.send(b.agent_id, f"m{i}")
    events = await asyncio.wait_for(listener, 30)
    assert [e["seq"] for e in events] == list(range(1, 12))
    key = protocol.inbox_stream_key(b.agent_id)
    await wait_until(lambda: stream_holds(redis_client, key, 11), "the push stream's 11 entries", 30)
    entries = await redis_client.xrange(key)
    assert [entry_id for entry_id, _ in entries] == [
        protocol.entry_id(seq).encode() for seq in range(1, 12)]


# --- long-poll ----------------------------------------------------------------------------

async def test_long_poll_returns_at_once_when_events_exist(mesh) -> None:
    a, b = await mesh.pair()
    await a.send(b.agent_id, "hi")
    data = await b.inbox(after=0, wait=20)
    assert [e["type"] for e in data["events"]] == ["friend.request", "task.created"]
    assert data["next_after"] == 2


async def test_long_poll_wakes_on_a_new_event(mesh) -> None:
    """The waiting poll is woken by a Redis notice (the commit's), not by
    its 5 s safety re-check or the 20 s wait running out."""
    a, b = await mesh.pair()
    poll = asyncio.create_task(b.inbox(after=1, wait=20))
    await asyncio.sleep(0.2)  # the poll is parked on the hub
    assert not poll.done()
    started = time.monotonic()
    sent = await a.send(b.agent_id, "wake up")
    data = await asyncio.wait_for(poll, 25)
    elapsed = time.monotonic() - started
    assert [e["task_id"] for e in data["events"]] == [sent["task_id"]]
    # Functional, not a speed claim: a wake-up by notification, far inside the
    # 5 s re-check interval that would otherwise have found it.
    assert elapsed < 4.0


async def test_long_poll_times_out_empty(mesh) -> None:
    _a, b = await mesh.pair()
    data = await b.inbox(after=1, wait=0.3)
    assert data == {"events": [], "next_after": 1}


@pytest.mark.parametrize("wait", ["-1", "31", "abc"])
async def test_long_poll_rejects_bad_wait(mesh, wait: str) -> None:
    _a, b = await mesh.pair()
    resp = await b.get("/v1/mesh/inbox", params={"wait": wait})
    assert resp.status_code == 422
    assert "wait" in resp.json()["detail"]


# --- receipts ---------------------------------------------------------------------------

async def test_receipts_queued_delivered_acked(mesh) -> None:
    a, b = await mesh.pair()
    task = await a.send(b.agent_id, "q")
    await a.reply(task["task_id"], "second")

    async def receipts() -> list[str]:
        resp = await a.get(f"/v1/mesh/tasks/{task['task_id']}")
        return [m["receipt"]["status"] for m in resp.json()["messages"]]

    async def receipts_are(*expected: str) -> bool:
        # Marked by the web process's batcher shortly after the hand-over (ADR 021).
        return await receipts() == list(expected)

    assert await receipts() == ["queued", "queued"]
    data = await b.inbox(after=0, limit=2)  # friend.request + task.created
    assert data["next_after"] == 2
    await until(lambda: receipts_are("delivered", "queued"))
    await b.inbox(after=2)
    await until(lambda: receipts_are("delivered", "delivered"))
    await b.post("/v1/mesh/inbox/ack", {"seq": 2})
    assert await receipts() == ["acked", "delivered"]
    resp = await a.get(f"/v1/mesh/tasks/{task['task_id']}")
    assert resp.json()["messages"][0]["receipt"]["delivered_at"] is not None


# --- metrics ------------------------------------------------------------------------------

async def test_delivery_metrics_are_exposed(mesh, gateway: str) -> None:
    a, b = await mesh.pair()
    await a.send(b.agent_id, "metrics")
    await b.inbox(after=0)
    async with httpx.AsyncClient(base_url=gateway) as client:
        text = (await client.get("/metrics")).text
    for name in ("agent_mesh_outbox_pending_total", "agent_mesh_outbox_dispatch_total",
                 "agent_mesh_message_e2e_latency_seconds_bucket", "agent_mesh_dedup_hit_total",
                 "agent_mesh_http_requests_total", "agent_mesh_ratelimit_rejected_total",
                 "agent_mesh_task_timeout_total", "agent_mesh_consumer_lag"):
        assert name in text, name
    count = next(line for line in text.splitlines()
                 if line.startswith("agent_mesh_message_e2e_latency_seconds_count"))
    assert float(count.split()[-1]) >= 1
    sent = [line for line in text.splitlines()
            if line.startswith('agent_mesh_outbox_dispatch_total{result="sent"}')]
    assert sent and float(sent[0].split()[-1]) >= 1


async def test_disconnected_streams_free_their_waiters(mesh, gateway: str) -> None:
    """Open streams show in the gauge; closing them gives everything back."""
    a, b = await mesh.pair()

    async def gauge() -> float:
        async with httpx.AsyncClient(base_url=gateway) as client:
            text = (await client.get("/metrics")).text
        line = next(x for x in text.splitlines() if x.startswith("agent_mesh_sse_connections "))
        return float(line.split()[-1])

    base = await gauge()
    clients = []
    for _ in range(20):
        client = httpx.AsyncClient(base_url=gateway, timeout=30)
        clients.append(client)
        resp = await client.send(client.build_request("GET", "/v1/mesh/inbox/stream",
                                                      headers=b.headers), stream=True)
        assert resp.status_code == 200
    assert await until(lambda: _equals(gauge, base + 20))
    for client in clients:
        await client.aclose()
    assert await until(lambda: _equals(gauge, base))


async def _equals(get, expected: float) -> bool:
    return await get() == expected


# --- streams end with their credentials ---------------------------------------------------

async def _stream_until_closed(url: str, headers: dict[str, str], started: asyncio.Event) -> int:
    """Follow a stream until the server ends it; return how many events came."""
    n = 0
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(10, read=60)) as client, \
            aconnect_sse(client, "GET", "/v1/mesh/inbox/stream", headers=headers) as source:
        started.set()
        async for sse in source.aiter_sse():
            if sse.data:
                n += 1
    return n


@pytest.mark.parametrize("how", ["revoke-key", "delete-agent"])
async def test_open_stream_ends_when_credentials_are_revoked(mesh, how: str) -> None:
    owner = await mesh.owner()
    a = await owner.agent("a")
    b = await owner.agent("b")
    await mesh.befriend(a, b)
    started = asyncio.Event()
    stream = asyncio.create_task(_stream_until_closed(str(mesh.http.base_url), b.headers, started))
    await started.wait()
    await a.send(b.agent_id, "before")
    if how == "revoke-key":
        resp = await owner.delete(f"/v1/agents/{b.agent_id}/keys/{b.key_id}")
    else:
        resp = await owner.delete(f"/v1/agents/{b.agent_id}")
    assert resp.status_code == 204
    # The notice makes the stream re-check at once (not at its 300 s safety re-check).
    assert await asyncio.wait_for(stream, 20) >= 1
    resp = await b.get("/v1/mesh/inbox/stream")
    assert resp.status_code == 401


async def test_open_stream_ends_when_its_token_expires(migrated: Settings, uniq: str) -> None:
    settings = isolated(migrated, uniq, agent_token_ttl_seconds=2)
    async with run_pipeline(settings) as pipe, MeshFactory.connect(pipe.url) as mesh:
        a, b = await mesh.pair()
        started = asyncio.Event()
        n = await asyncio.wait_for(_stream_until_closed(pipe.url, b.headers, started), 30)
        assert n == 1  # the friend request, then the stream closed at expiry


async def test_relay_is_woken_after_each_commit_not_by_its_sweep(migrated: Settings,
                                                                  uniq: str) -> None:
    """With the safety-net sweep at 10 minutes, every send still reaches the SSE
    client: the web process wakes the relay after each commit."""
    settings = isolated(migrated, uniq, relay_sweep_seconds=600.0)
    async with run_pipeline(settings) as pipe, MeshFactory.connect(pipe.url) as mesh:
        a, b = await mesh.pair()
        for i in range(3):
            await a.send(b.agent_id, f"m{i}")
            # Each one on its own: the relay is idle between sends.
            events = await read_sse(pipe.url, b.headers, count=i + 2)
            assert [e["seq"] for e in events] == list(range(1, i + 3))
