"""One conformance suite for every bus (Kafka, NATS JetStream, Redis Streams), against real brokers.

Each test runs once per implementation with its own topic/stream and group. A
new bus is done when this file passes for it. Every check counts records; none
asserts a duration. Waits are polling loops with generous deadlines, because a
Kafka group join takes seconds on a loaded two-core machine.

The tests at the end cover behaviour only one implementation has (Kafka topic
limits, a Redis stream vanishing, NATS dedup by msg id and a lost stream).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace

import pytest
import redis.asyncio as aioredis

from app.platform.settings import Settings
from devstack.process import ServiceProcess, free_port
from devstack.stack import Stack
from workers.bus import (
    BusOptions,
    BusStartError,
    Delivery,
    Publisher,
    PublishError,
    RecordRejected,
    Subscriber,
)
from workers.bus_factory import create_publisher, create_subscriber

# Short timeouts keep outage tests quick; claim_idle is short so a stopped
# Redis consumer's pending entries come back within the test.
TEST_OPTIONS = BusOptions(publish_timeout=3.0, connect_timeout=10.0, claim_idle=1.0,
                          claim_interval=0.5)
DEADLINE = 90.0  # seconds; only ever hit when something is broken


def _settings(base: Settings, **update: object) -> Settings:
    s = base.model_copy(update=update)
    # bus_kind is a cached_property and model_copy copies the cache with it.
    s.__dict__.pop("bus_kind", None)
    return s


@dataclass
class Bus:
    kind: str
    settings: Settings
    stack: Stack
    uniq: str
    options: BusOptions = TEST_OPTIONS
    opened: list[Publisher | Subscriber] = field(default_factory=list)

    @property
    def group(self) -> str:
        return f"g-{self.uniq}"

    def broker(self) -> ServiceProcess:
        service = {"kafka": self.stack.kafka, "nats": self.stack.nats,
                   "redis": self.stack.redis}[self.kind]
        if service is None:
            pytest.skip(f"{self.kind} comes from the environment; cannot restart it here")
        return service

    async def publisher(self, options: BusOptions | None = None) -> Publisher:
        pub = create_publisher(self.settings, options or self.options)
        await pub.start()
        self.opened.append(pub)
        return pub

    async def subscriber(self, name: str, options: BusOptions | None = None) -> Subscriber:
        sub = create_subscriber(self.settings, self.group, name, options or self.options)
        await sub.start()
        self.opened.append(sub)
        return sub

    async def close(self, thing: Publisher | Subscriber) -> None:
        self.opened.remove(thing)
        await thing.stop()


@pytest.fixture(params=["kafka", "nats", "redis"])
async def bus(
    request: pytest.FixtureRequest, stack: Stack, base_settings: Settings, uniq: str
) -> AsyncIterator[Bus]:
    kind: str = request.param
    if kind == "kafka" and not base_settings.kafka_bootstrap:
        pytest.skip("no Kafka in this environment (CI fails earlier, in conftest)")
    if kind == "nats" and not base_settings.nats_url:
        pytest.skip("no nats-server in this environment (CI fails earlier, in conftest)")
    settings = _settings(base_settings, bus=kind, bus_topic=f"conformance.{uniq}")
    b = Bus(kind=kind, settings=settings, stack=stack, uniq=uniq)
    try:
        yield b
    finally:
        for thing in reversed(b.opened):
            await thing.stop()


def records(keys: Sequence[str], per_key: int, tag: str = "r") -> list[tuple[str, bytes]]:
    """per_key records for every key, interleaved; value says (key, n)."""
    return [
        (key, json.dumps({"key": key, "n": n, "tag": tag}).encode())
        for n in range(per_key)
        for key in keys
    ]


def ident(d: Delivery | tuple[str, bytes]) -> tuple[str, int, str]:
    value = d.value if isinstance(d, Delivery) else d[1]
    body = json.loads(value)
    return body["key"], body["n"], body["tag"]


async def publish_all(pub: Publisher, recs: Sequence[tuple[str, bytes]], batch: int = 500) -> None:
    for start in range(0, len(recs), batch):
        results = await pub.publish_batch(recs[start:start + batch])
        failed = [r for r in results if r is not None]
        assert not failed, f"{len(failed)} records failed, first: {failed[0]!r}"


async def consume(
    sub: Subscriber, want: int, *, commit: bool = True, deadline: float = DEADLINE
) -> list[Delivery]:
    """Fetch until ``want`` deliveries arrived, committing each fetch unless told not to."""
    got: list[Delivery] = []
    try:
        async with asyncio.timeout(deadline):
            while len(got) < want:
                batch = await sub.fetch(max_records=500, wait=0.5)
                if batch and commit:
                    await sub.commit(batch)
                got.extend(batch)
    except TimeoutError:
        pytest.fail(f"only {len(got)} of {want} deliveries arrived within {deadline:.0f}s")
    return got


async def test_everything_published_is_consumed_once_in_key_order(bus: Bus) -> None:
    keys = [f"agent{i}@{bus.uniq}" for i in range(16)]
    recs = records(keys, per_key=125)  # 2,000
    pub = await bus.publisher()
    sub = await bus.subscriber("c1")
    await publish_all(pub, recs)

    got = await consume(sub, len(recs))

    ids = [ident(d) for d in got]
    assert len(ids) == len(set(ids)) == len(recs), "a record was lost or duplicated"
    assert set(ids) == {ident(r) for r in recs}
    assert all(d.key == ident(d)[0] for d in got), "delivery key differs from published key"
    for key in keys:
        ns = [n for k, n, _ in ids if k == key]
        assert ns == sorted(ns), f"records of {key} arrived out of order"
    assert await pub.publish_batch([]) == []


async def test_a_records_traceparent_travels_as_its_header(bus: Bus) -> None:
    """What the relay sets per record comes back on the delivery; a record
    published without one has none."""
    keys = [f"agent{i}@{bus.uniq}" for i in range(4)]
    recs = records(keys, per_key=10)
    traces = [None if i % 3 == 0 else f"00-{i:032x}-{i + 1:016x}-01" for i in range(len(recs))]
    pub = await bus.publisher()
    sub = await bus.subscriber("c1")
    assert await pub.publish_batch(recs, traceparents=traces) == [None] * len(recs)
    got = await consume(sub, len(recs))
    sent = {ident(r): tp for r, tp in zip(recs, traces, strict=True)}
    assert {ident(d): d.traceparent for d in got} == sent
    assert sum(tp is not None for tp in sent.values()) == 26


async def test_uncommitted_deliveries_go_to_the_next_member_committed_ones_do_not(
    bus: Bus,
) -> None:
    keys = [f"agent{i}@{bus.uniq}" for i in range(8)]
    recs = records(keys, per_key=25)  # 200
    pub = await bus.publisher()
    # A long claim_idle, so that this member never reclaims its own uncommitted
    # deliveries while the test holds them.
    first = await bus.subscriber("first", replace(TEST_OPTIONS, claim_idle=600.0))
    await publish_all(pub, recs)

    got = await consume(first, len(recs), commit=False)
    # Commit a prefix in fetch order (the contract: on Kafka a commit covers
    # the earlier deliveries of the same partition).
    done, undone = got[:80], got[80:]
    await first.commit(done)
    await bus.close(first)  # as if it crashed after the commit

    second = await bus.subscriber("second")
    again = await consume(second, len(undone))
    assert {ident(d) for d in again} == {ident(d) for d in undone}

    # Anything redelivered late on a key would come before that key's marker.
    markers = [(key, json.dumps({"key": key, "n": -1, "tag": "marker"}).encode()) for key in keys]
    await publish_all(pub, markers)
    tail = await consume(second, len(markers))
    assert sorted(ident(d) for d in tail) == sorted(ident(m) for m in markers), (
        "a committed record was delivered again"
    )


async def test_two_members_of_a_group_share_the_work_and_lose_nothing(bus: Bus) -> None:
    keys = [f"agent{i}@{bus.uniq}" for i in range(32)]
    pub = await bus.publisher()
    members = [await bus.subscriber("m1"), await bus.subscriber("m2")]
    received: list[list[Delivery]] = [[], []]
    seen: set[tuple[str, int, str]] = set()
    published: set[tuple[str, int, str]] = set()
    publishing = asyncio.Event()
    publishing.set()
    all_in = asyncio.Event()
    stop = asyncio.Event()

    async def run(i: int) -> None:
        while not stop.is_set():
            batch = await members[i].fetch(max_records=100, wait=0.3)
            if batch:
                await members[i].commit(batch)
                received[i].extend(batch)
                seen.update(ident(d) for d in batch)
            if not publishing.is_set() and published <= seen:
                all_in.set()

    tasks = [asyncio.create_task(run(0)), asyncio.create_task(run(1))]
    try:
        async with asyncio.timeout(DEADLINE):
            wave = 0
            # Publish in waves until both members have had work: a Kafka member
            # only gets partitions once the group has rebalanced.
            while not (received[0] and received[1]) or wave < 4:
                recs = records(keys, per_key=2, tag=f"w{wave}")
                await publish_all(pub, recs)
                published.update(ident(r) for r in recs)
                wave += 1
                await asyncio.sleep(0.2)
            publishing.clear()
            await all_in.wait()
    finally:
        stop.set()
        await asyncio.gather(*tasks)

    assert seen == published  # no loss; a rebalance may redeliver (at-least-once)
    assert received[0] and received[1], "one member got no work"


async def test_a_record_over_the_size_limit_fails_alone(bus: Bus) -> None:
    options = replace(TEST_OPTIONS, max_record_bytes=256 * 1024)
    key = f"agent@{bus.uniq}"
    small = records([key], per_key=10)
    poison = (key, b"x" * (options.max_record_bytes + 1))
    batch = [*small[:5], poison, *small[5:]]
    pub = await bus.publisher(options)
    sub = await bus.subscriber("c1")

    results = await pub.publish_batch(batch)

    assert [r is None for r in results] == [True] * 5 + [False] + [True] * 5
    err = results[5]
    assert isinstance(err, RecordRejected) and not err.retriable, repr(err)
    assert "bytes" in str(err)
    got = await consume(sub, len(small))
    assert [ident(d) for d in got] == [ident(r) for r in small]


async def test_start_fails_clearly_when_the_broker_is_unreachable(bus: Bus) -> None:
    nowhere = f"127.0.0.1:{free_port()}"
    settings = _settings(bus.settings, kafka_bootstrap=nowhere, redis_url=f"redis://{nowhere}/0",
                         nats_url=f"nats://{nowhere}")
    options = replace(TEST_OPTIONS, connect_timeout=2.0)
    with pytest.raises(BusStartError):
        await create_publisher(settings, options).start()
    with pytest.raises(BusStartError):
        await create_subscriber(settings, bus.group, "c1", options).start()


@pytest.mark.faults
async def test_broker_outage_fails_publishes_then_recovers_without_loss(bus: Bus) -> None:
    keys = [f"agent{i}@{bus.uniq}" for i in range(8)]
    pub = await bus.publisher()
    idle_pub = await bus.publisher()
    sub = await bus.subscriber("c1")
    before = records(keys, per_key=10, tag="before")
    during = records(keys, per_key=5, tag="during")
    after = records(keys, per_key=10, tag="after")
    await publish_all(pub, before)
    acked = {ident(r) for r in before}
    got: set[tuple[str, int, str]] = set()

    async def take() -> None:
        batch = await sub.fetch(max_records=500, wait=0.5)
        if batch:
            await sub.commit(batch)
            got.update(ident(d) for d in batch)

    broker = bus.broker()
    broker.stop()
    try:
        # Hang guards far above publish_timeout: the contract is "errors, not a hang".
        guard = TEST_OPTIONS.publish_timeout * 10
        async with asyncio.timeout(guard):
            results = await pub.publish_batch(during)
        assert all(isinstance(r, PublishError) and r.retriable for r in results), results
        async with asyncio.timeout(guard):
            # Must not raise; may still hand out records fetched before the stop.
            await take()
        async with asyncio.timeout(guard):
            await bus.close(idle_pub)
    finally:
        broker.start()

    # What a relay does: retry what failed until the bus takes it.
    pending = list(during) + list(after)
    async with asyncio.timeout(DEADLINE):
        while pending:
            results = await pub.publish_batch(pending)
            acked |= {ident(r) for r, res in zip(pending, results, strict=True) if res is None}
            pending = [r for r, res in zip(pending, results, strict=True) if res is not None]
            if pending:
                await asyncio.sleep(0.5)
    assert len(acked) == len(before) + len(during) + len(after)

    try:
        async with asyncio.timeout(DEADLINE):
            while not acked <= got:
                await take()
    except TimeoutError:
        missing = acked - got
        pytest.fail(f"{len(missing)} acknowledged records never arrived, e.g. {min(missing)}")
    assert got == acked, "a record nobody published arrived"


@pytest.mark.parametrize("bus", ["kafka"], indirect=True)
async def test_kafka_respects_a_smaller_topic_limit(bus: Bus) -> None:
    """Kafka only: a topic created elsewhere with a small max.message.bytes. The
    publisher must refuse the big record itself; a broker refusal would break
    the idempotent sequence of the records behind it."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    limit = 64 * 1024
    admin = AIOKafkaAdminClient(bootstrap_servers=bus.settings.kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(bus.settings.bus_topic, 2, 1,
                                             topic_configs={"max.message.bytes": str(limit)})])
    finally:
        await admin.close()
    key = f"agent@{bus.uniq}"
    small = records([key], per_key=6)
    batch = [*small[:3], (key, b"y" * (limit * 2)), *small[3:]]
    pub = await bus.publisher()
    sub = await bus.subscriber("c1")

    results = await pub.publish_batch(batch)

    assert [r is None for r in results] == [True] * 3 + [False] + [True] * 3
    assert isinstance(results[3], RecordRejected)
    got = await consume(sub, len(small))
    assert [ident(d) for d in got] == [ident(r) for r in small]


@pytest.mark.parametrize("bus", ["redis"], indirect=True)
async def test_redis_group_is_recreated_when_the_stream_vanishes(bus: Bus) -> None:
    """Redis only: Redis came back without our stream (data lost). The
    subscriber recreates its group (NOGROUP) and carries on."""
    from workers.bus_redis import stream_key

    key = f"agent@{bus.uniq}"
    pub = await bus.publisher()
    sub = await bus.subscriber("c1")
    first = records([key], per_key=5, tag="first")
    await publish_all(pub, first)
    assert len(await consume(sub, len(first))) == len(first)

    client = aioredis.from_url(bus.settings.redis_url)
    try:
        await client.delete(stream_key(bus.settings.bus_topic))
    finally:
        await client.aclose()
    second = records([key], per_key=5, tag="second")
    await publish_all(pub, second)

    got = await consume(sub, len(second))
    assert [ident(d) for d in got] == [ident(r) for r in second]


def test_nats_subject_tokens_are_safe_and_reversible() -> None:
    from workers.bus_nats_stream import decode_key, encode_key, stream_name, subject

    for key in ["bob@acme.io", "a_b", "_", "", "x.*>y z", "ünï@c.de", "A-Z09"]:
        token = encode_key(key)
        assert decode_key(token) == key
        assert all(c.isascii() and (c.isalnum() or c in "-_") for c in token), token
    assert subject("inbox.events", "bob@acme.io") == "inbox.events.bob_40acme_2Eio"
    assert stream_name("inbox.events") == "MESH_inbox_2Eevents"


def test_nats_duplicate_window_outlasts_the_relay_retry_horizon() -> None:
    from workers.bus import duplicate_window, retry_horizon

    defaults = Settings()
    horizon = retry_horizon(defaults.relay_retry_base_seconds, defaults.relay_max_attempts)
    assert horizon == 5 * 1023
    assert BusOptions.from_settings(defaults).nats.duplicate_window == duplicate_window(
        defaults.relay_retry_base_seconds, defaults.relay_max_attempts) > horizon


async def _nats_stream_messages(bus: Bus) -> int:
    import nats

    from workers.bus_nats_stream import stream_name

    nc = await nats.connect(bus.settings.nats_url)
    try:
        info = await nc.jetstream().stream_info(stream_name(bus.settings.bus_topic))
        return int(info.state.messages)
    finally:
        await nc.close()


@pytest.mark.parametrize("bus", ["nats"], indirect=True)
async def test_nats_stores_a_republished_msg_id_once(bus: Bus) -> None:
    """NATS only: what a relay does after a crash between publish and "sent"
    (the same outbox ids again) is acked as a duplicate and stored once."""
    keys = [f"agent{i}@{bus.uniq}" for i in range(4)]
    recs = records(keys, per_key=5)  # 20
    ids = [f"outbox-{i}" for i in range(len(recs))]
    pub = await bus.publisher()
    sub = await bus.subscriber("c1")

    assert await pub.publish_batch(recs, msg_ids=ids) == [None] * len(recs)
    # Republished: acknowledged (a duplicate ack is success), not stored again.
    assert await pub.publish_batch(recs, msg_ids=ids) == [None] * len(recs)
    # Without ids the id is the content's: an identical republish is dropped too.
    assert await pub.publish_batch(recs[:5]) == [None] * 5
    assert await pub.publish_batch(recs[:5]) == [None] * 5
    assert await _nats_stream_messages(bus) == len(recs) + 5

    got = await consume(sub, len(recs) + 5)
    assert sorted(ident(d) for d in got) == sorted(ident(r) for r in [*recs, *recs[:5]])


@pytest.mark.parametrize("bus", ["nats"], indirect=True)
async def test_nats_stream_and_consumer_are_recreated_when_the_stream_vanishes(bus: Bus) -> None:
    """NATS only: the stream was deleted (NATS lost its data). Publishes fail
    until the publisher recreates it; the subscriber recreates its consumer."""
    import nats

    from workers.bus_nats_stream import stream_name

    key = f"agent@{bus.uniq}"
    pub = await bus.publisher()
    sub = await bus.subscriber("c1")
    first = records([key], per_key=5, tag="first")
    await publish_all(pub, first)
    assert len(await consume(sub, len(first))) == len(first)

    nc = await nats.connect(bus.settings.nats_url)
    try:
        await nc.jetstream().delete_stream(stream_name(bus.settings.bus_topic))
    finally:
        await nc.close()
    second = records([key], per_key=5, tag="second")
    pending = list(second)
    async with asyncio.timeout(DEADLINE):
        while pending:
            results = await pub.publish_batch(pending)
            pending = [r for r, res in zip(pending, results, strict=True) if res is not None]

    got = await consume(sub, len(second))
    assert [ident(d) for d in got] == [ident(r) for r in second]


@pytest.mark.parametrize("bus", ["nats"], indirect=True)
async def test_nats_a_dead_members_deliveries_come_back_after_ack_wait(bus: Bus) -> None:
    """NATS only: a member that dies holding deliveries (no NAK, no stop) —
    the group redelivers them once ``ack_wait`` (= claim_idle, 1 s here) passed."""
    from prometheus_client import REGISTRY

    def redeliveries() -> float:
        return REGISTRY.get_sample_value("agent_mesh_nats_redeliveries_total") or 0.0

    keys = [f"agent{i}@{bus.uniq}" for i in range(4)]
    recs = records(keys, per_key=10)  # 40
    pub = await bus.publisher()
    first = await bus.subscriber("first")
    await publish_all(pub, recs)
    held = await consume(first, len(recs), commit=False)
    assert len(held) == len(recs)
    # kill -9 of the process, as far as the broker can tell: the connection
    # drops, nothing is acked or handed back.
    bus.opened.remove(first)
    await first._nc.close()  # type: ignore[attr-defined]
    before = redeliveries()

    second = await bus.subscriber("second")
    again = await consume(second, len(recs))

    assert sorted(ident(d) for d in again) == sorted(ident(r) for r in recs)
    assert redeliveries() - before == len(recs)
