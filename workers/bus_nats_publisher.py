"""NATS JetStream bus, publishing side: pipelined publishes, broker-side dedup.

Every publish carries ``Nats-Msg-Id``: the outbox row id when the relay passes
``msg_ids``, else a hash of key and value. JetStream stores a repeated id once
within the stream's ``duplicate_window`` and answers it with a *duplicate* ack,
which counts as success: a relay that crashed after the publish and before
marking the row sent republishes without filling the stream twice (see
``docs/decisions/015-nats-bus.md``).

Consumers still drop a seq they already have; the broker dedup only keeps the
stream (and the fan-out's work) from growing with relay retries.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Sequence
from typing import Any

from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from nats.js.errors import APIError, NoStreamResponseError

from app.platform.metrics import DEDUP_HITS
from workers.bus import (
    TRACE_HEADER,
    BusOptions,
    BusStartError,
    BusUnavailable,
    PublishError,
    RecordRejected,
    record_too_large,
)
from workers.bus_nats_stream import (
    UNREACHABLE,
    close_quietly,
    connect,
    ensure_stream,
    stream_name,
    subject,
)

log = logging.getLogger(__name__)

MSG_ID = "Nats-Msg-Id"
# Headroom under the server's max_payload for the subject and headers.
_HEADER_ROOM = 1024


def content_id(key: str, value: bytes) -> str:
    """The msg id of a record published without one: the same bytes, the same id."""
    return hashlib.sha256(key.encode() + b"\0" + value).hexdigest()[:32]


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
        except (*UNREACHABLE, APIError) as exc:
            await close_quietly(nc, self._options.connect_timeout)
            raise BusStartError(f"cannot create stream {stream_name(self._topic)} on "
                                f"{self._url}: {exc!r}") from exc
        self._nc, self._js = nc, js

    async def stop(self) -> None:
        nc, self._nc, self._js = self._nc, None, None
        await close_quietly(nc, self._options.connect_timeout)

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
        except UNREACHABLE as exc:
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
        except (*UNREACHABLE, APIError) as exc:
            log.warning("recreating nats stream %s failed: %r", stream_name(self._topic), exc)


def _unavailable(text: str, cause: BaseException,
                 kind: type[PublishError] = BusUnavailable) -> PublishError:
    err = kind(text)
    err.__cause__ = cause
    return err
