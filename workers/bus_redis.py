"""Redis Streams bus: one stream per topic (``bus:{topic}``) read by consumer groups.

One stream keeps every key's records in publish order. A consumer that dies
leaves its un-acked entries in the group's pending list; every subscriber
periodically claims entries pending longer than ``claim_idle`` (XAUTOCLAIM), so
they are redelivered. If the stream or group vanishes (Redis lost its data),
the group is recreated from the start of whatever the stream holds.

Redis has no record size limit worth the name (512 MB), so ``max_record_bytes``
is enforced here, before sending, with the same rule as the Kafka bus.
Durability of an acknowledged record is that of the Redis persistence setting
(``appendfsync everysec``: a Redis crash may lose the last second; a clean
shutdown loses nothing). Postgres remains the source of truth.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from workers.bus import (
    TRACE_HEADER,
    BusOptions,
    BusStartError,
    BusUnavailable,
    Delivery,
    PublishError,
    record_too_large,
)

log = logging.getLogger(__name__)

_KEY = b"k"
_VALUE = b"v"
_TRACE = TRACE_HEADER.encode()
# Connection-level trouble: the broker is (maybe briefly) unreachable.
_UNREACHABLE = (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError)


def stream_key(topic: str) -> str:
    return f"bus:{topic}"


def _connect(url: str, options: BusOptions, socket_timeout: float | None) -> aioredis.Redis:
    return aioredis.from_url(
        url,
        socket_connect_timeout=options.connect_timeout,
        socket_timeout=socket_timeout,
        # One immediate retry on a dropped connection, so the first command
        # after a Redis restart does not fail on a stale pooled socket. A
        # retried XADD pipeline may write a record twice: consumers dedup by seq.
        retry=Retry(NoBackoff(), 1),
        retry_on_error=[RedisConnectionError],
    )


async def _ping(client: aioredis.Redis, url: str, options: BusOptions) -> None:
    try:
        async with asyncio.timeout(options.connect_timeout):
            await client.ping()
    except (RedisError, *_UNREACHABLE) as exc:
        await client.aclose()
        raise BusStartError(f"cannot reach Redis at {url}: {exc!r}; check MESH_REDIS_URL") from exc


class RedisPublisher:
    """XADD pipelines (not transactions): each record succeeds or fails alone."""

    def __init__(self, url: str, topic: str, options: BusOptions) -> None:
        self._url = url
        self._stream = stream_key(topic)
        self._options = options
        self._client: aioredis.Redis | None = None

    async def start(self) -> None:
        client = _connect(self._url, self._options, self._options.publish_timeout)
        await _ping(client, self._url, self._options)
        self._client = client

    async def stop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def publish_batch(
        self, records: Sequence[tuple[str, bytes]], msg_ids: Sequence[str] | None = None,
        traceparents: Sequence[str | None] | None = None,
    ) -> list[PublishError | None]:
        # msg_ids: unused, duplicates are dropped by the consumers' seq check.
        if self._client is None:
            raise RuntimeError("RedisPublisher.start() was not called (or stop() was)")
        results: list[PublishError | None] = [None] * len(records)
        sent: list[int] = []
        pipe = self._client.pipeline(transaction=False)
        for i, (key, value) in enumerate(records):
            rejected = record_too_large(key, value, self._options.max_record_bytes)
            if rejected is not None:
                results[i] = rejected
                continue
            fields = {_KEY: key.encode(), _VALUE: value}
            tp = traceparents[i] if traceparents is not None else None
            if tp:
                fields[_TRACE] = tp.encode()
            pipe.xadd(
                self._stream,
                fields,
                maxlen=self._options.stream_maxlen,
                approximate=True,
            )
            sent.append(i)
        if not sent:
            return results
        try:
            async with asyncio.timeout(self._options.publish_timeout):
                replies = await pipe.execute(raise_on_error=False)
        except (RedisError, *_UNREACHABLE) as exc:
            for i in sent:
                err = BusUnavailable(f"Redis did not acknowledge: {exc!r}")
                err.__cause__ = exc
                results[i] = err
            return results
        for i, reply in zip(sent, replies, strict=True):
            if isinstance(reply, Exception):
                # e.g. OOM or WRONGTYPE: a broker/configuration state, not the
                # record's fault, so retriable.
                err = PublishError(f"Redis refused the record: {reply}")
                err.__cause__ = reply
                results[i] = err
        return results


class RedisSubscriber:
    """XREADGROUP member; commit = XACK; reclaims idle pending entries of dead members."""

    def __init__(
        self, url: str, topic: str, group: str, consumer_name: str, options: BusOptions
    ) -> None:
        self._url = url
        self._stream = stream_key(topic)
        self._group = group
        self._name = consumer_name
        self._options = options
        self._client: aioredis.Redis | None = None
        self._next_claim = 0.0

    async def start(self) -> None:
        # No socket timeout: XREADGROUP BLOCK legitimately waits; each call is
        # bounded by asyncio.timeout instead.
        client = _connect(self._url, self._options, None)
        await _ping(client, self._url, self._options)
        try:
            async with asyncio.timeout(self._options.connect_timeout):
                await self._ensure_group(client)
        except (RedisError, *_UNREACHABLE) as exc:
            await client.aclose()
            raise BusStartError(
                f"cannot create group {self._group!r} on {self._stream}: {exc!r}"
            ) from exc
        self._client = client
        self._next_claim = 0.0  # look for a dead member's work straight away

    async def stop(self) -> None:
        # Deliberately no XGROUP DELCONSUMER: it would drop our pending entries
        # from the group, and they could never be redelivered.
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def _ensure_group(self, client: aioredis.Redis) -> None:
        try:
            # "0": a new group reads the stream from its start, like Kafka's
            # auto_offset_reset=earliest.
            await client.xgroup_create(self._stream, self._group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def fetch(self, max_records: int, wait: float) -> list[Delivery]:
        client = self._require()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(wait + self._options.connect_timeout):
                if loop.time() >= self._next_claim:
                    claimed = await self._reclaim(client, max_records)
                    if claimed:
                        return claimed
                reply = await client.xreadgroup(
                    self._group,
                    self._name,
                    {self._stream: ">"},
                    count=max_records,
                    # BLOCK 0 would mean "forever"; None means "do not block".
                    block=int(wait * 1000) or None,
                )
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                log.warning("redis fetch on %s failed: %s", self._stream, exc)
                await asyncio.sleep(min(wait, 1.0))
                return []
            log.warning("redis group %s/%s is gone (data lost?); recreating it from the "
                        "start of the stream", self._stream, self._group)
            try:
                await self._ensure_group(client)
            except (RedisError, *_UNREACHABLE) as again:
                log.warning("recreating redis group failed: %r", again)
            return []
        except (RedisError, *_UNREACHABLE) as exc:
            log.warning("redis unreachable while fetching from %s: %r", self._stream, exc)
            await asyncio.sleep(min(wait, 1.0))
            return []
        deliveries: list[Delivery] = []
        for _stream, entries in reply or []:
            deliveries.extend(_delivery(entry_id, fields) for entry_id, fields in entries)
        return deliveries

    async def _reclaim(self, client: aioredis.Redis, max_records: int) -> list[Delivery]:
        """Take over entries pending longer than claim_idle, ours included."""
        loop = asyncio.get_running_loop()
        # JUSTID and then XRANGE, because on Redis 6.2 XAUTOCLAIM returns an
        # entry deleted by MAXLEN trimming as nil without its id, so it could
        # never be acked and would clog the pending list forever.
        ids: list[bytes] = await client.xautoclaim(
            self._stream,
            self._group,
            self._name,
            min_idle_time=int(self._options.claim_idle * 1000),
            start_id="0-0",
            count=max_records,
            justid=True,
        )
        # A full page means more may be waiting: look again on the next fetch.
        self._next_claim = loop.time() + (0 if len(ids) >= max_records else
                                          self._options.claim_interval)
        if not ids:
            return []
        pipe = client.pipeline(transaction=False)
        for entry_id in ids:
            pipe.xrange(self._stream, entry_id, entry_id)
        found = await pipe.execute()
        deliveries: list[Delivery] = []
        gone: list[bytes] = []
        for entry_id, rows in zip(ids, found, strict=True):
            if rows:
                deliveries.append(_delivery(*rows[0]))
            else:
                gone.append(entry_id)
        if gone:
            # Trimmed from the stream before anyone acked it: nothing left to
            # deliver (Postgres still has the event); stop tracking it.
            log.warning("%d pending entries of %s were trimmed before delivery",
                        len(gone), self._stream)
            await client.xack(self._stream, self._group, *gone)
        log.info("reclaimed %d idle entries on %s for %s", len(deliveries), self._stream,
                 self._name)
        return deliveries

    async def commit(self, deliveries: Sequence[Delivery]) -> None:
        client = self._require()
        if not deliveries:
            return
        try:
            async with asyncio.timeout(self._options.publish_timeout):
                await client.xack(self._stream, self._group, *[d.offset for d in deliveries])
        except (RedisError, *_UNREACHABLE) as exc:
            log.warning("redis XACK failed; entries will be reclaimed and redelivered: %r", exc)

    def _require(self) -> aioredis.Redis:
        if self._client is None:
            raise RuntimeError("RedisSubscriber.start() was not called (or stop() was)")
        return self._client


def _delivery(entry_id: bytes, fields: dict[bytes, Any]) -> Delivery:
    return Delivery(
        key=fields.get(_KEY, b"").decode(),
        value=fields.get(_VALUE, b""),
        partition=0,
        offset=entry_id.decode(),
        traceparent=trace.decode() if (trace := fields.get(_TRACE)) else None,
    )
