"""The push worker's batch path (ADR 022): seq and type read from the wire head
without parsing the body, one pipeline per batch with one notice per agent,
duplicates refused by Redis, and offsets committed by a stop."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import pytest
import redis.asyncio as aioredis

from app.delivery import protocol as delivery
from app.domain.event_wire import WireEvent, encode_event, peek
from app.platform.settings import Settings
from workers import push as push_worker
from workers.bus import Delivery
from workers.bus_redis import stream_key
from workers.push import Push, PushEvent, parse
from workers.runtime import opened


def event(seq: int, kind: str, payload: object = None) -> bytes:
    return encode_event({"seq": seq, "event_id": f'e"{seq}\\', "type": kind, "task_id": None,
                         "context_id": None, "from_agent_id": "a@x",
                         "created_at": datetime.now(UTC), "payload": payload or {"n": seq}})


@pytest.mark.parametrize("kind", ["task.message", 'qu"ote', "back\\slash", "ünï\ncode", ""])
def test_peek_reads_seq_and_type_as_a_full_parse_would(kind: str) -> None:
    data = event(41, kind, {"type": "not this one", "seq": 0})
    full = json.loads(data)
    assert peek(data) == (full["seq"], full["type"])


def test_bytes_the_serializer_did_not_make_are_parsed_in_full() -> None:
    assert peek(b'{"type":"x","seq":3}') is None
    assert peek(b'{"seq": 3, "event_id": "e", "type": "x"}') is None  # spaced: not ours
    parsed = parse(Delivery("k", b'{"type":"x","seq":3}', 0, 0))
    assert parsed is not None and (parsed.event.seq, parsed.event.type) == (3, "x")
    untyped = parse(Delivery("k", b'{"seq":4,"event_id":"e","type":""}', 0, 0))
    assert untyped is not None and untyped.event.type == "message"
    assert parse(Delivery("k", b"not json", 0, 0)) is None


async def test_one_pipeline_writes_a_batch_refuses_repeats_and_notices_each_agent_once(
        migrated: Settings, redis_client: aioredis.Redis, uniq: str) -> None:
    agents = [f"pb-{uniq}-{n}@nobody" for n in range(2)]
    batch = [PushEvent(agents[i % 2],
                       WireEvent(i // 2 + 1, "task.message", event(i // 2 + 1, "t")))
             for i in range(10)]
    pubsub = redis_client.pubsub(ignore_subscribe_messages=True)
    await pubsub.subscribe(*(delivery.inbox_channel(a) for a in agents))
    try:
        push = Push(migrated, redis_client, subscriber=None)  # type: ignore[arg-type]
        await push.write(batch)
        # A redelivery of the last three: Redis refuses ids not above the stream's last.
        await push.write(batch[-3:])
        assert (push.written, push.duplicates) == (10, 3)
        notices: list[delivery.Notice] = []

        async def until_both() -> None:
            while {n.agent_id for n in notices} != set(agents):
                message = await pubsub.get_message(timeout=5.0)
                if message is not None:
                    found = delivery.parse_notice(message["data"])
                    if found.agent_id in agents:
                        notices.append(found)

        await asyncio.wait_for(until_both(), 30)
        # The pipeline's notices come before the redelivery's: one per agent each,
        # carrying that agent's events of the batch.
        assert [n.agent_id for n in notices] == agents
        for notice in notices:
            assert delivery.carried_events(notice.carried) == [
                ev.event for ev in batch if ev.agent_id == notice.agent_id]
    finally:
        await pubsub.aclose()
    for agent_id in agents:
        key = delivery.inbox_stream_key(agent_id)
        entries = await redis_client.xrange(key)
        mine = [ev for ev in batch if ev.agent_id == agent_id]
        assert [e for e, _ in entries] == [delivery.entry_id(ev.event.seq).encode() for ev in mine]
        assert [f[delivery.EVENT_FIELD] for _, f in entries] == [ev.event.data for ev in mine]
        assert 0 < await redis_client.ttl(key) <= delivery.STREAM_TTL_SECONDS
        await redis_client.delete(key)


async def test_a_stop_commits_what_was_written(migrated: Settings,
                                               redis_client: aioredis.Redis, uniq: str) -> None:
    """Commits are spaced out (COMMIT_INTERVAL); a stop must not leave written
    records uncommitted, or every restart would redeliver them."""
    settings = migrated.model_copy(update={"bus": "redis", "bus_topic": f"t-{uniq}",
                                           "push_group": f"g-{uniq}"})
    agent_id = f"pc-{uniq}@nobody"
    async with opened(settings) as rt:
        worker = await push_worker.build(rt)
        await worker.start()
        publisher = await rt.publisher()
        assert await publisher.publish_batch(
            [(agent_id, event(seq, "t")) for seq in range(1, 6)]) == [None] * 5
        key = delivery.inbox_stream_key(agent_id)
        async with asyncio.timeout(30):
            while await redis_client.xlen(key) < 5:  # noqa: ASYNC110 - no event to await
                await asyncio.sleep(0.005)
        await worker.stop()
    pending = await redis_client.xpending(stream_key(settings.bus_topic), settings.push_group)
    assert pending["pending"] == 0
    await redis_client.delete(key, stream_key(settings.bus_topic))
