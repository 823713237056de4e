"""NATS JetStream bus: one stream per topic, one subject per recipient, broker-side dedup.

Layout (see ``docs/decisions/015-nats-bus.md``):

* Stream :func:`stream_name` (``MESH_inbox_2Eevents`` for topic ``inbox.events``),
  file storage, subjects ``{topic}.*``. One stream keeps every record in publish
  order, so a recipient's records stay in order like on one Redis stream. ``*``
  (one token) rather than ``>``: the streams of topics ``inbox.events`` and
  ``inbox.events.iso-1`` then never overlap, which NATS would refuse.
* Subject ``{topic}.{encode_key(agent_id)}``: agent ids contain ``@`` and ``.``,
  which NATS reads as a token separator, so :func:`encode_key` escapes every
  byte outside ``[A-Za-z0-9-]`` as ``_XX`` (hex, UTF-8), reversibly.
* Every publish carries ``Nats-Msg-Id``: the outbox row id when the relay passes
  ``msg_ids``, else a hash of key and value. JetStream stores a repeated id once
  within the stream's ``duplicate_window`` and answers it with a *duplicate*
  ack, which counts as success: a relay that crashed after the publish and
  before marking the row sent republishes without filling the stream twice.
* The push fan-out shares one durable pull consumer (the group), explicit acks,
  ``ack_wait`` = ``claim_idle``: a fetched message that is not acked in time is
  redelivered, to any member. :meth:`NatsSubscriber.stop` NAKs what it holds so
  a clean stop hands work back at once.

Consumers still drop a seq they already have; the broker dedup only keeps the
stream (and the fan-out's work) from growing with relay retries.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Sequence
from typing import Any

import nats
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig
from nats.js.errors import APIError, NoStreamResponseError, NotFoundError

from app.platform.metrics import DEDUP_HITS, NATS_REDELIVERIES, RECONNECTS
from workers.bus import (
    TRACE_HEADER,
    BusOptions,
    BusStartError,
    BusUnavailable,
    Delivery,
    PublishError,
    RecordRejected,
    record_too_large,
)

log = logging.getLogger(__name__)

MSG_ID = "Nats-Msg-Id"
_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")
# Headroom under the server's max_payload for the subject and headers.
_HEADER_ROOM = 1024
_UNREACHABLE = (NatsError, OSError, TimeoutError)


def encode_key(key: str) -> str:
    """One subject token for a key: ``bob@acme.io`` → ``bob_40acme_2Eio``.

    ``_`` is the escape and so is itself escaped (``_5F``); the empty key,
    which is not a valid token, is the lone ``_``.
    """
    if not key:
        return "_"
    return "".join(chr(b) if b in _SAFE else f"_{b:02X}" for b in key.encode())


def decode_key(token: str) -> str:
    if token == "_":
        return ""
    out = bytearray()
    i = 0
    while i < len(token):
        if token[i] == "_":
            out.append(int(token[i + 1:i + 3], 16))
            i += 3
        else:
            out.append(ord(token[i]))
            i += 1
    return out.decode()


def stream_name(topic: str) -> str:
    # Stream names may not contain '.', '*', '>' or whitespace; the same escape fits.
    return f"MESH_{encode_key(topic)}"


def subject(topic: str, key: str) -> str:
    return f"{topic}.{encode_key(key)}"


def content_id(key: str, value: bytes) -> str:
    """The msg id of a record published without one: the same bytes, the same id."""
    return hashlib.sha256(key.encode() + b"\0" + value).hexdigest()[:32]


async def connect(url: str, options: BusOptions, name: str) -> NatsClient:
    """A client that reconnects forever after it first connected; raises
    :class:`BusStartError` when the first connect fails within ``connect_timeout``."""

    async def on_error(exc: Exception) -> None:
        log.debug("nats client %s: %r", name, exc)

    async def on_disconnect() -> None:
        log.warning("nats client %s lost its connection to %s", name, url)

    async def on_reconnect() -> None:
        RECONNECTS.labels(component="nats").inc()
        log.info("nats client %s reconnected to %s", name, url)

    try:
        async with asyncio.timeout(options.connect_timeout):
            return await nats.connect(
                url, name=name, connect_timeout=max(1, int(options.connect_timeout)),
                allow_reconnect=True, max_reconnect_attempts=-1, reconnect_time_wait=0.5,
                error_cb=on_error, disconnected_cb=on_disconnect, reconnected_cb=on_reconnect)
    except _UNREACHABLE as exc:
        raise BusStartError(f"cannot reach NATS at {url}: {exc!r}; check MESH_NATS_URL "
                            "(and that the server runs with JetStream, -js)") from exc


async def ensure_stream(js: JetStreamContext, topic: str, options: BusOptions) -> None:
    """Create the topic's stream, or bring its duplicate window up to ours."""
    name = stream_name(topic)
    config = StreamConfig(
        name=name, subjects=[f"{topic}.*"], storage=StorageType.FILE,
        duplicate_window=options.nats.duplicate_window,
        # Like the Redis bus's MAXLEN: bounds the disk, drops the oldest;
        # Postgres stays the history.
        max_msgs=options.stream_maxlen, max_msg_size=-1)
    try:
        info = await js.stream_info(name)
    except NotFoundError:
        await js.add_stream(config)
        log.info("nats stream %s created (duplicate window %.0f s)", name,
                 options.nats.duplicate_window)
        return
    if (info.config.duplicate_window or 0) < options.nats.duplicate_window:
        await js.update_stream(info.config.evolve(duplicate_window=options.nats.duplicate_window))
        log.info("nats stream %s: duplicate window raised to %.0f s", name,
                 options.nats.duplicate_window)


async def _close(nc: NatsClient | None, timeout: float) -> None:
    if nc is None:
        return
    try:
        async with asyncio.timeout(timeout):
            await nc.close()
    except Exception as exc:  # closing must never hang or raise
        log.debug("closing a nats client failed: %r", exc)


class NatsPublisher:
    """``publish_async`` for the whole batch (pipelined on one connection, so in
    order), then one wait for all acks bounded by ``publish_timeout``."""

    def __init__(self, url: str, topic: str, options: BusOptions) -> None:
        self._url = url
        self._topic = topic
        self._options = options
        self._nc: NatsClient | None = None
        self._js: JetStreamContext | None = None
        self._stream_missing = False

    async def start(self) -> None:
        nc = await connect(self._url, self._options, "mesh-relay")
        js = nc.jetstream(timeout=self._options.publish_timeout)
        try:
            async with asyncio.timeout(self._options.connect_timeout):
                await ensure_stream(js, self._topic, self._options)
        except (*_UNREACHABLE, APIError) as exc:
            await _close(nc, self._options.connect_timeout)
            raise BusStartError(f"cannot create stream {stream_name(self._topic)} on "
                                f"{self._url}: {exc!r}") from exc
        self._nc, self._js = nc, js

    async def stop(self) -> None:
        nc, self._nc, self._js = self._nc, None, None
        await _close(nc, self._options.connect_timeout)

    def _limit(self, nc: NatsClient) -> int:
        server_max = nc.max_payload or 1024 * 1024
        return min(self._options.max_record_bytes, server_max - _HEADER_ROOM)

    async def publish_batch(
        self, records: Sequence[tuple[str, bytes]], msg_ids: Sequence[str] | None = None,
        traceparents: Sequence[str | None] | None = None,
    ) -> list[PublishError | None]:
        if self._nc is None or self._js is None:
            raise RuntimeError("NatsPublisher.start() was not called (or stop() was)")
        nc, js = self._nc, self._js
        results: list[PublishError | None] = [None] * len(records)
        if not records:
            return results
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._options.publish_timeout
        if self._stream_missing:
            await self._recreate_stream(js)
        limit = self._limit(nc)
        futures: dict[int, asyncio.Future[Any]] = {}
        try:
            async with asyncio.timeout_at(deadline):
                for i, (key, value) in enumerate(records):
                    rejected = record_too_large(key, value, limit)
                    if rejected is not None:
                        results[i] = rejected
                        continue
                    msg_id = msg_ids[i] if msg_ids is not None else content_id(key, value)
                    headers = {MSG_ID: msg_id}
                    tp = traceparents[i] if traceparents is not None else None
                    if tp:
                        headers[TRACE_HEADER] = tp
                    futures[i] = await js.publish_async(
                        subject(self._topic, key), value, headers=headers)
        except _UNREACHABLE as exc:
            # Not sent at all from here on: fail the rest of the batch.
            for i in range(len(records)):
                if results[i] is None and i not in futures:
                    results[i] = _unavailable(f"NATS did not take the publish: {exc!r}", exc)
        if futures:
            await asyncio.wait(futures.values(), timeout=max(0.0, deadline - loop.time()))
        duplicates = 0
        for i, future in futures.items():
            if not future.done():
                future.cancel()  # releases its slot in the client's pending window
                results[i] = BusUnavailable(
                    f"NATS did not acknowledge within {self._options.publish_timeout:g} s")
                continue
            exc = future.exception()
            if exc is None:
                duplicates += bool(future.result().duplicate)
            elif isinstance(exc, NoStreamResponseError):
                # Nobody answers for the subject: the stream is gone (NATS lost
                # its data) or JetStream is still starting. Recreate before the
                # relay's retry.
                self._stream_missing = True
                results[i] = _unavailable(f"no NATS stream answers for {self._topic}.*", exc)
            elif isinstance(exc, APIError) and exc.err_code == 10054:
                results[i] = _unavailable(f"NATS refused the record as too large: {exc}", exc,
                                          RecordRejected)
            else:
                results[i] = _unavailable(f"NATS refused the record: {exc!r}", exc)
        if duplicates:
            DEDUP_HITS.labels(where="bus").inc(duplicates)
        return results

    async def _recreate_stream(self, js: JetStreamContext) -> None:
        try:
            async with asyncio.timeout(self._options.publish_timeout):
                await ensure_stream(js, self._topic, self._options)
            self._stream_missing = False
        except (*_UNREACHABLE, APIError) as exc:
            log.warning("recreating nats stream %s failed: %r", stream_name(self._topic), exc)


def _unavailable(text: str, cause: BaseException,
                 kind: type[PublishError] = BusUnavailable) -> PublishError:
    err = kind(text)
    err.__cause__ = cause
    return err


class NatsSubscriber:
    """A member of durable pull consumer ``group``; commit = ack of each message."""

    def __init__(
        self, url: str, topic: str, group: str, consumer_name: str, options: BusOptions
    ) -> None:
        self._url = url
        self._topic = topic
        self._stream = stream_name(topic)
        self._group = group
        self._name = consumer_name
        self._options = options
        self._nc: NatsClient | None = None
        self._js: JetStreamContext | None = None
        self._sub: JetStreamContext.PullSubscription | None = None
        # Fetched, not yet acked, by stream sequence: what commit() acks and
        # stop() hands back. A redelivery replaces the entry.
        self._held: dict[int, Msg] = {}
        self._next_check = 0.0

    async def start(self) -> None:
        nc = await connect(self._url, self._options, f"mesh-push-{self._name}")
        js = nc.jetstream(timeout=self._options.connect_timeout)
        try:
            async with asyncio.timeout(self._options.connect_timeout):
                self._sub = await self._bind(js)
        except (*_UNREACHABLE, APIError) as exc:
            await _close(nc, self._options.connect_timeout)
            raise BusStartError(f"cannot create consumer {self._group!r} on stream "
                                f"{self._stream} at {self._url}: {exc!r}") from exc
        self._nc, self._js = nc, js

    async def _bind(self, js: JetStreamContext) -> JetStreamContext.PullSubscription:
        await ensure_stream(js, self._topic, self._options)
        try:
            await js.consumer_info(self._stream, self._group)
        except NotFoundError:
            await js.add_consumer(self._stream, ConsumerConfig(
                durable_name=self._group, name=self._group,
                deliver_policy=DeliverPolicy.ALL,  # a new group reads the stream from its start
                ack_policy=AckPolicy.EXPLICIT, ack_wait=self._options.claim_idle,
                max_deliver=-1, filter_subject=f"{self._topic}.*",
                # Unacked messages the group may hold; above one fetch of every
                # member, so a slow member does not stall the others.
                max_ack_pending=self._options.nats.max_ack_pending))
        return await js.pull_subscribe_bind(durable=self._group, stream=self._stream)

    async def stop(self) -> None:
        nc, self._nc, self._js, self._sub = self._nc, None, None, None
        held, self._held = list(self._held.values()), {}
        if nc is None:
            return
        if held and nc.is_connected:
            # Hand uncommitted work back now instead of after ack_wait.
            try:
                async with asyncio.timeout(self._options.connect_timeout):
                    for msg in held:
                        await msg.nak()
                    await nc.flush()
            except Exception as exc:
                log.debug("nats NAK on stop failed; redelivery after ack_wait: %r", exc)
        await _close(nc, self._options.connect_timeout)

    async def fetch(self, max_records: int, wait: float) -> list[Delivery]:
        sub, js = self._require()
        try:
            async with asyncio.timeout(wait + self._options.connect_timeout):
                msgs = await sub.fetch(batch=max_records, timeout=max(wait, 0.05))
        except TimeoutError:
            await self._check_consumer(js)
            return []
        except (NatsError, OSError) as exc:
            log.warning("nats fetch from %s/%s failed: %r", self._stream, self._group, exc)
            self._next_check = 0.0
            await self._check_consumer(js)
            await asyncio.sleep(min(wait, 1.0))
            return []
        deliveries: list[Delivery] = []
        redelivered = 0
        for msg in msgs:
            meta = msg.metadata
            seq = meta.sequence.stream
            redelivered += meta.num_delivered > 1
            self._held[seq] = msg
            deliveries.append(Delivery(key=decode_key(msg.subject[len(self._topic) + 1:]),
                                       value=msg.data, partition=0, offset=seq,
                                       traceparent=(msg.headers or {}).get(TRACE_HEADER)))
        if redelivered:
            NATS_REDELIVERIES.inc(redelivered)
        return deliveries

    async def _check_consumer(self, js: JetStreamContext) -> None:
        """Every ``claim_interval`` while idle: is our consumer still there? A
        NATS that lost its data answers no pull at all, so an idle fetch is the
        only sign; recreate the stream and consumer from the stream's start."""
        loop = asyncio.get_running_loop()
        if loop.time() < self._next_check or self._nc is None or not self._nc.is_connected:
            return
        self._next_check = loop.time() + self._options.claim_interval
        try:
            async with asyncio.timeout(self._options.connect_timeout):
                try:
                    await js.consumer_info(self._stream, self._group)
                    return
                except NotFoundError:
                    log.warning("nats consumer %s/%s is gone (data lost?); recreating it",
                                self._stream, self._group)
                old, self._sub = self._sub, await self._bind(js)
                self._held.clear()
                if old is not None:
                    await old.unsubscribe()
        except (*_UNREACHABLE, APIError) as exc:
            log.warning("checking nats consumer %s/%s failed: %r", self._stream, self._group, exc)

    async def commit(self, deliveries: Sequence[Delivery]) -> None:
        self._require()
        assert self._nc is not None
        msgs = [m for m in (self._held.pop(int(d.offset), None) for d in deliveries)
                if m is not None]
        if not msgs:
            return
        try:
            async with asyncio.timeout(self._options.publish_timeout):
                for msg in msgs:
                    await msg.ack()  # a plain publish; flushed below as one write
                await self._nc.flush()
        except Exception as exc:
            log.warning("nats ack failed; %d messages will be redelivered after ack_wait: %r",
                        len(msgs), exc)

    def _require(self) -> tuple[JetStreamContext.PullSubscription, JetStreamContext]:
        if self._sub is None or self._js is None:
            raise RuntimeError("NatsSubscriber.start() was not called (or stop() was)")
        return self._sub, self._js


async def probe(url: str, max_wait: float) -> None:
    """For /readyz: connect once and ask JetStream for the account info."""
    async def quiet(exc: Exception) -> None:
        pass  # the probe's result says it

    nc = await nats.connect(url, connect_timeout=max(1, int(max_wait)), allow_reconnect=False,
                            max_reconnect_attempts=0, name="mesh-readyz", error_cb=quiet)
    try:
        await nc.jetstream(timeout=max_wait).account_info()
    finally:
        await _close(nc, max_wait)
