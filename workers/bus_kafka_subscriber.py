"""Kafka bus, consuming side: one member of a consumer group, explicit commits.

Nothing is auto-committed: an offset moves only when the caller (the push
fan-out, after writing) commits the deliveries, and only on partitions this
member still owns. A record whose commit is lost to a rebalance or a broker
error is delivered again from the last commit, never skipped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from workers.bus import TRACE_HEADER, BusOptions, BusStartError, Delivery
from workers.bus_kafka_topic import connection_options, ensure_topic

log = logging.getLogger(__name__)


def _trace_header(headers: Sequence[tuple[str, bytes]] | None) -> str | None:
    for name, value in headers or ():
        if name == TRACE_HEADER and value:
            return value.decode("latin-1")
    return None


class KafkaSubscriber:
    """One member of a consumer group; commits are explicit offsets (offset + 1)."""

    def __init__(
        self, bootstrap: str, topic: str, group: str, consumer_name: str, options: BusOptions
    ) -> None:
        self._bootstrap = bootstrap
        self._topic = topic
        self._group = group
        self._name = consumer_name
        self._options = options
        self._consumer: AIOKafkaConsumer | None = None

    async def start(self) -> None:
        consumer: AIOKafkaConsumer | None = None
        try:
            async with asyncio.timeout(self._options.connect_timeout):
                await ensure_topic(self._bootstrap, self._topic, self._options)
                consumer = AIOKafkaConsumer(
                    self._topic,
                    bootstrap_servers=self._bootstrap,
                    group_id=self._group,
                    client_id=self._name,
                    enable_auto_commit=False,
                    # A new group starts from the oldest record: events published
                    # before the first worker ever ran must still be delivered.
                    auto_offset_reset="earliest",
                    **connection_options(self._options.kafka),
                )
                await consumer.start()
        except (TimeoutError, KafkaError, OSError) as exc:
            if consumer is not None:
                await consumer.stop()
            raise BusStartError(
                f"cannot join group {self._group!r} on Kafka {self._bootstrap}: {exc!r}"
            ) from exc
        self._consumer = consumer

    async def stop(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            try:
                await asyncio.wait_for(consumer.stop(), self._options.connect_timeout)
            except (TimeoutError, KafkaError, OSError) as exc:
                log.warning("kafka consumer %s did not leave its group cleanly: %r",
                            self._name, exc)

    async def fetch(self, max_records: int, wait: float) -> list[Delivery]:
        consumer = self._require()
        try:
            batches = await consumer.getmany(
                timeout_ms=int(wait * 1000), max_records=max_records
            )
        except KafkaError as exc:
            log.warning("kafka fetch failed (will retry): %r", exc)
            await asyncio.sleep(min(wait, 1.0))
            return []
        return [
            Delivery(
                key=rec.key.decode() if rec.key is not None else "",
                value=rec.value if rec.value is not None else b"",
                partition=tp.partition,
                offset=rec.offset,
                traceparent=_trace_header(rec.headers),
            )
            for tp, recs in batches.items()
            for rec in recs
        ]

    async def commit(self, deliveries: Sequence[Delivery]) -> None:
        consumer = self._require()
        offsets: dict[TopicPartition, int] = {}
        for d in deliveries:
            tp = TopicPartition(self._topic, d.partition)
            offsets[tp] = max(offsets.get(tp, 0), int(d.offset) + 1)
        assigned = consumer.assignment()
        moved = [tp.partition for tp in offsets if tp not in assigned]
        if moved:
            # Revoked in a rebalance: the new owner starts from the last commit.
            log.info("kafka partitions %s moved to another member; they will be redelivered", moved)
        offsets = {tp: off for tp, off in offsets.items() if tp in assigned}
        if not offsets:
            return
        try:
            # aiokafka retries a retriable commit error forever; bound it.
            async with asyncio.timeout(self._options.publish_timeout):
                await consumer.commit(offsets)
        except (CommitFailedError, IllegalStateError) as exc:
            log.warning("kafka commit lost to a rebalance; records will be redelivered: %r", exc)
        except (TimeoutError, KafkaError) as exc:
            log.warning("kafka commit failed; records may be redelivered: %r", exc)

    def _require(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            raise RuntimeError("KafkaSubscriber.start() was not called (or stop() was)")
        return self._consumer
