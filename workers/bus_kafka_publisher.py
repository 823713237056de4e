"""Kafka bus, publishing side: an idempotent acks=all producer, bounded by us.

Two aiokafka behaviours shape this module (aiokafka 0.14):

* An idempotent producer never expires a batch: while the broker is down,
  ``send()`` futures and ``stop()`` wait forever (aio-libs/aiokafka#1101). So a
  publish is bounded by our own timeout, and a producer that missed it (or hit
  any delivery error, e.g. OutOfOrderSequenceNumber after a broker blip) is
  discarded and a fresh one is built on the next call.
* A record over the size limit is refused by ``send()`` before it is buffered,
  which keeps the producer healthy. A refusal by the *broker* would leave a gap
  in the partition's sequence numbers and fail the records behind it, so the
  client limit is kept at or below the topic's ``max.message.bytes``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError, MessageSizeTooLargeError, RecordListTooLargeError
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from workers.bus import (
    TRACE_HEADER,
    BusOptions,
    BusStartError,
    BusUnavailable,
    PublishError,
    RecordRejected,
    record_too_large,
)
from workers.bus_kafka_topic import RECORD_OVERHEAD, connection_options, ensure_topic

log = logging.getLogger(__name__)

_MAX_BATCH_BYTES = 256 * 1024
# Keys (agents) whose partition is remembered; past that the cache starts over.
_PARTITION_CACHE = 100_000
_PARTITIONER = DefaultPartitioner()
_estimate_size = DefaultRecordBatchBuilder.estimate_size_in_bytes


def _rejected(exc: BaseException) -> RecordRejected:
    err = RecordRejected(f"the broker will not take this record: {exc!r}")
    err.__cause__ = exc
    return err


def _unavailable(message: str, cause: BaseException | None) -> BusUnavailable:
    err = BusUnavailable(message)
    err.__cause__ = cause
    return err


async def _abandon(producer: AIOKafkaProducer, grace: float) -> None:
    """Close a producer without waiting for what it still holds.

    aiokafka#1101: stop() first waits until every buffered batch is resolved,
    which an idempotent producer never does while the broker is away. Failing
    the batches ourselves trips aiokafka's bookkeeping for batches it already
    retried, so we stop the sender task and close the connections instead; the
    buffered futures stay pending and are dropped with the producer (callers
    were already told those records were not acknowledged). Private
    attributes, looked up defensively.
    """
    sender_task = getattr(getattr(producer, "_sender", None), "sender_task", None)
    if isinstance(sender_task, asyncio.Task) and not sender_task.done():
        sender_task.cancel()
        await asyncio.wait([sender_task], timeout=grace)
    producer._closed = True  # what stop() sets before flushing; silences __del__
    try:
        await asyncio.wait_for(producer.client.close(), grace)
    except Exception as exc:  # a producer we throw away must not break the caller
        log.warning("abandoned kafka producer did not close cleanly: %r", exc)


async def _close_producer(producer: AIOKafkaProducer, grace: float) -> None:
    """Graceful when the broker acknowledges what is buffered within ``grace``."""
    try:
        await asyncio.wait_for(producer.flush(), grace)
    except TimeoutError:
        await _abandon(producer, grace)
        return
    try:
        await asyncio.wait_for(producer.stop(), grace)
    except Exception as exc:
        log.warning("kafka producer did not close cleanly: %r", exc)
        await _abandon(producer, grace)


class KafkaPublisher:
    """Publishes to one topic; key = agent_id decides the partition, hence the order."""

    def __init__(self, bootstrap: str, topic: str, options: BusOptions) -> None:
        self._bootstrap = bootstrap
        self._topic = topic
        self._options = options
        self._producer: AIOKafkaProducer | None = None
        self._topic_limit: int | None = None
        self._request_limit = options.max_record_bytes + RECORD_OVERHEAD
        self._partitions: list[int] = []
        self._partition_of: dict[str, int] = {}
        # One batch at a time: swapping a broken producer must not race a send.
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        try:
            async with asyncio.timeout(self._options.connect_timeout):
                self._topic_limit = await ensure_topic(self._bootstrap, self._topic, self._options)
                self._producer = await self._new_producer()
        except (TimeoutError, KafkaError, OSError) as exc:
            raise BusStartError(
                f"cannot reach Kafka at {self._bootstrap} to publish to {self._topic!r}: {exc!r}; "
                "check MESH_KAFKA_BOOTSTRAP and that the broker is up"
            ) from exc

    async def stop(self) -> None:
        async with self._lock:
            producer, self._producer = self._producer, None
            if producer is not None:
                await _close_producer(producer, self._options.publish_timeout)

    async def _new_producer(self) -> AIOKafkaProducer:
        limit = self._options.max_record_bytes + RECORD_OVERHEAD
        if self._topic_limit is not None:
            limit = min(limit, self._topic_limit)
        self._request_limit = limit
        producer = AIOKafkaProducer(
            bootstrap_servers=self._bootstrap,
            # aiokafka defaults to acks=1 without idempotence: a leader crash
            # could lose an acked record, or a retry could duplicate it.
            enable_idempotence=True,
            acks="all",
            max_request_size=limit,
            max_batch_size=min(_MAX_BATCH_BYTES, limit),
            request_timeout_ms=max(1000, int(self._options.publish_timeout * 1000)),
            linger_ms=0,
            **connection_options(self._options.kafka),
        )
        try:
            await producer.start()
        except BaseException:
            await _abandon(producer, 1.0)
            raise
        return producer

    async def publish_batch(
        self, records: Sequence[tuple[str, bytes]], msg_ids: Sequence[str] | None = None,
        traceparents: Sequence[str | None] | None = None,
    ) -> list[PublishError | None]:
        # msg_ids: unused, duplicates are dropped by the consumers' seq check.
        results: list[PublishError | None] = [None] * len(records)
        todo: list[int] = []
        for i, (key, value) in enumerate(records):
            rejected = record_too_large(key, value, self._options.max_record_bytes)
            if rejected is not None:
                results[i] = rejected
            else:
                todo.append(i)
        if todo:
            async with self._lock:
                await self._publish(records, todo, results, traceparents)
        return results

    async def _publish(
        self,
        records: Sequence[tuple[str, bytes]],
        todo: list[int],
        results: list[PublishError | None],
        traceparents: Sequence[str | None] | None = None,
    ) -> None:
        """One closed record batch per partition (more only past max_batch_size),
        handed to the producer whole: no per-record future, partition lookup or
        accumulator call, and every partition's batch leaves in one produce
        request instead of the first record alone followed by the rest."""
        timeout = self._options.publish_timeout
        submitted: list[tuple[list[int], asyncio.Future[Any]]] = []
        broken: BaseException | None = None
        try:
            async with asyncio.timeout(timeout):
                if self._producer is None:
                    self._producer = await self._new_producer()
                producer = self._producer
                by_partition = self._route(records, todo, results,
                                           sorted(await producer.partitions_for(self._topic)))
                try:
                    for partition, indexes in by_partition.items():
                        await self._submit(producer, partition, records, indexes, submitted,
                                           traceparents)
                except KafkaError as exc:
                    # The producer itself is failing (dead sender, no metadata,
                    # closed accumulator): stop feeding it.
                    broken = exc
                if submitted:
                    await asyncio.wait([fut for _, fut in submitted])
        except TimeoutError:
            broken = broken or TimeoutError(f"no acknowledgement within {timeout}s")
        except (KafkaError, OSError) as exc:
            broken = exc  # building the producer failed: the broker is unreachable

        for indexes, fut in submitted:
            error: PublishError | None = None
            if not fut.done() or fut.cancelled():
                error = _unavailable(f"Kafka did not acknowledge within {timeout}s", broken)
            elif (exc := fut.exception()) is not None:
                # With idempotence aiokafka retries retriable errors itself, so
                # a failed future means the producer's state is suspect.
                broken = broken or exc
                error = (_rejected(exc)
                         if isinstance(exc, MessageSizeTooLargeError | RecordListTooLargeError)
                         else _unavailable(f"Kafka did not take the record: {exc!r}", exc))
            else:
                continue
            for i in indexes:
                results[i] = error
        done = {i for indexes, _ in submitted for i in indexes}
        for i in todo:
            if results[i] is None and i not in done:
                results[i] = _unavailable(f"not sent to Kafka: {broken!r}", broken)

        if broken is not None and self._producer is not None:
            producer, self._producer = self._producer, None
            log.warning("kafka producer reset after %r; the next publish builds a new one", broken)
            await _abandon(producer, min(timeout, 5.0))

    def _route(
        self,
        records: Sequence[tuple[str, bytes]],
        todo: list[int],
        results: list[PublishError | None],
        partitions: list[int],
    ) -> dict[int, list[int]]:
        """The records to send by partition, in publish order; a record over the
        request limit is refused here, as ``send()`` would have refused it."""
        if partitions != self._partitions:
            self._partitions = partitions
            self._partition_of.clear()
        elif len(self._partition_of) > _PARTITION_CACHE:
            self._partition_of.clear()
        by_partition: dict[int, list[int]] = {}
        for i in todo:
            key, value = records[i]
            size = _estimate_size(key.encode(), value, [])
            if size > self._request_limit:
                results[i] = _rejected(MessageSizeTooLargeError(
                    f"the record is {size} bytes, over max_request_size {self._request_limit}"))
                continue
            partition = self._partition_of.get(key)
            if partition is None:
                # The default partitioner's choice (murmur2 of the key), so a key
                # keeps the partition that per-record send() gave it.
                partition = _PARTITIONER(key.encode(), partitions, partitions)
                self._partition_of[key] = partition
            by_partition.setdefault(partition, []).append(i)
        return by_partition

    async def _submit(
        self,
        producer: AIOKafkaProducer,
        partition: int,
        records: Sequence[tuple[str, bytes]],
        indexes: list[int],
        submitted: list[tuple[list[int], asyncio.Future[Any]]],
        traceparents: Sequence[str | None] | None,
    ) -> None:
        batch = producer.create_batch()
        members: list[int] = []
        for i in indexes:
            key, value = records[i]
            tp = traceparents[i] if traceparents is not None else None
            headers = [(TRACE_HEADER, tp.encode())] if tp else []
            if batch.append(key=key.encode(), value=value, timestamp=None,
                            headers=headers) is None:
                # Full: send it and start the next (an empty batch takes any record).
                submitted.append((members, await producer.send_batch(
                    batch, self._topic, partition=partition)))
                batch, members = producer.create_batch(), []
                batch.append(key=key.encode(), value=value, timestamp=None, headers=headers)
            members.append(i)
        # Closed, so the sender takes it at once instead of lingering for more.
        batch.close()
        submitted.append((members, await producer.send_batch(batch, self._topic,
                                                             partition=partition)))
