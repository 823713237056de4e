"""The push worker and the web process speak one protocol (app/delivery/protocol.py):
what push writes to Redis is what the SSE reader reads, the notice it
publishes is what the hub parses, and no other module spells the names."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import redis.asyncio as aioredis

from app.delivery import protocol as delivery
from app.domain.event_wire import WireEvent, encode_event
from app.platform.settings import Settings
from app.services.stream import InboxReader
from tests.support.isolated import stream_holds, wait_until
from workers.push import Push, PushEvent

ROOT = Path(__file__).resolve().parent.parent


async def test_push_writes_what_the_reader_reads(migrated: Settings, db: asyncpg.Pool,
                                                 redis_client: aioredis.Redis,
                                                 uniq: str) -> None:
    agent_id = f"proto-{uniq}@nobody"  # no such agent: Postgres has nothing, Redis all
    data = encode_event({"seq": 1, "event_id": f"e-{uniq}", "type": "task.message",
                         "task_id": None, "context_id": None, "from_agent_id": None,
                         "created_at": datetime.now(UTC), "payload": {"n": 1}})
    pubsub = redis_client.pubsub(ignore_subscribe_messages=True)
    await pubsub.subscribe(delivery.inbox_channel(agent_id))
    try:
        push = Push(migrated, redis_client, subscriber=None)  # type: ignore[arg-type]
        await push.write([PushEvent(agent_id, WireEvent(1, "task.message", data))])
        assert push.written == 1

        async def notice() -> delivery.Notice:
            while True:
                message = await pubsub.get_message(timeout=5.0)
                if message is not None:
                    found = delivery.parse_notice(message["data"])
                    if found.agent_id == agent_id:
                        return found

        found = await asyncio.wait_for(notice(), 30)
        assert (found.agent_id, found.kind) == (agent_id, "event")
        assert delivery.carried_events(found.carried) == [WireEvent(1, "task.message", data)]
    finally:
        await pubsub.aclose()

    key = delivery.inbox_stream_key(agent_id)
    [(entry, fields)] = await redis_client.xrange(key)
    assert delivery.entry_seq(entry) == 1 and entry == delivery.entry_id(1).encode()
    assert fields == {delivery.EVENT_FIELD: data, delivery.TYPE_FIELD: b"task.message"}
    assert 0 < await redis_client.ttl(key) <= delivery.STREAM_TTL_SECONDS

    reader = InboxReader(db, redis_client, agent_id, 0)
    assert await reader.next_batch() == []  # the catch-up from Postgres: nothing there
    assert await reader.next_batch() == [WireEvent(1, "task.message", data)]
    assert reader.more is False  # drained: what comes next is announced by a notice

    # seq 3 without seq 2, which Postgres does not have either: the reader stops
    # before the gap and says to read again rather than wait for a notice.
    await push.write([PushEvent(agent_id, WireEvent(3, "task.message", data))])
    assert await reader.next_batch() == []
    assert reader.more is True and reader.last == 1
    await redis_client.delete(key)


async def test_the_reader_hands_over_carried_events_that_go_on_from_its_last(
        migrated: Settings, db: asyncpg.Pool, redis_client: aioredis.Redis, uniq: str) -> None:
    """Which bytes come back tells where they were read: the notice's (here unlike
    the stream's) or the Redis stream's."""
    agent_id = f"carry-{uniq}@nobody"  # no such agent: Postgres has nothing
    push = Push(migrated, redis_client, subscriber=None)  # type: ignore[arg-type]
    in_redis = [PushEvent(agent_id,
                          WireEvent(seq, "task.message", b'{"in":"redis","seq":%d}' % seq))
                for seq in (1, 2, 3)]
    await push.write(in_redis[:1])
    reader = InboxReader(db, redis_client, agent_id, 0)
    assert await reader.next_batch() == []  # the catch-up from Postgres

    carried = [WireEvent(1, "task.message", b'{"in":"notice"}')]
    assert await reader.next_batch(offered=carried) == carried  # no read of the stream
    assert (reader.last, reader.more) == (1, False)
    assert await reader.next_batch(offered=carried) == []  # handed over already: no read
    assert reader.more is False

    # An offer that does not go on from seq 1 (the notice of 2 was missed): the
    # stream is read, and its bytes come back.
    await push.write(in_redis[1:])
    assert await reader.next_batch(offered=[WireEvent(3, "task.message", b"{}")]) == [
        ev.event for ev in in_redis[1:]]
    assert reader.last == 3
    await redis_client.delete(delivery.inbox_stream_key(agent_id))


async def test_an_offer_after_a_hole_the_stream_lacks_is_read_from_postgres(
        mesh, db: asyncpg.Pool, redis_client: aioredis.Redis) -> None:
    """A commit's notice can arrive before the stream has the event before it (two
    web processes, the relay's linger): the offer proves both are committed, so
    the reader reads Postgres instead of waiting for the next notice."""
    a, b = await mesh.pair()  # seq 1: the friend request
    for i in range(3):
        await a.send(b.agent_id, f"m{i}")  # seqs 2, 3, 4
    key = delivery.inbox_stream_key(b.agent_id)
    await wait_until(lambda: stream_holds(redis_client, key, 4), "the push stream's 4 entries", 30)
    await redis_client.delete(key)  # a stream that has none of them yet

    reader = InboxReader(db, redis_client, b.agent_id, 2)
    reader.catching_up = False
    got = await reader.next_batch(offered=[WireEvent(4, "task.created", b"{}")])
    page = (await b.get("/v1/mesh/inbox", params={"after": 2})).content
    assert [ev.seq for ev in got] == [3, 4]
    assert all(ev.data in page for ev in got)  # Postgres's bytes, not the offer's
    assert reader.last == 4


def test_only_the_protocol_module_spells_the_names() -> None:
    spelled = {"mesh:inbox-notify", '"inbox:', "'inbox:", 'f"inbox:'}
    offenders = []
    for folder in ("app", "workers", "cron"):
        for path in (ROOT / folder).rglob("*.py"):
            if path == ROOT / "app" / "delivery" / "protocol.py":
                continue
            text = path.read_text()
            offenders += [f"{path.relative_to(ROOT)}: {s}" for s in spelled if s in text]
    assert not offenders, f"protocol names outside app/delivery/protocol.py: {offenders}"
