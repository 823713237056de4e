"""NATS JetStream bus, consuming side: a member of the push fan-out's durable consumer.

The fan-out shares one durable pull consumer (the group), explicit acks,
``ack_wait`` = ``claim_idle``: a fetched message that is not acked in time is
redelivered, to any member. :meth:`NatsSubscriber.stop` NAKs what it holds so a
clean stop hands work back at once. A NATS that lost its data answers no pull
at all, so an idle member checks now and then that its consumer still exists
and recreates stream and consumer when it does not (see
``docs/decisions/015-nats-bus.md``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import APIError, NotFoundError

from app.platform.metrics import NATS_REDELIVERIES
from workers.bus import TRACE_HEADER, BusOptions, BusStartError, Delivery
from workers.bus_nats_stream import (
    UNREACHABLE,
    close_quietly,
    connect,
    decode_key,
    ensure_stream,
    stream_name,
)

log = logging.getLogger(__name__)


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
        except (*UNREACHABLE, APIError) as exc:
            await close_quietly(nc, self._options.connect_timeout)
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
        await close_quietly(nc, self._options.connect_timeout)

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
        except (*UNREACHABLE, APIError) as exc:
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
