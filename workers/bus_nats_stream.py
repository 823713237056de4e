"""What every NATS JetStream client of the bus shares: names, connection, stream.

Layout (see ``docs/decisions/015-nats-bus.md``):

* Stream :func:`stream_name` (``MESH_inbox_2Eevents`` for topic ``inbox.events``),
  file storage, subjects ``{topic}.*``. One stream keeps every record in publish
  order, so a recipient's records stay in order like on one Redis stream. ``*``
  (one token) rather than ``>``: the streams of topics ``inbox.events`` and
  ``inbox.events.iso-1`` then never overlap, which NATS would refuse.
* Subject ``{topic}.{encode_key(agent_id)}``: agent ids contain ``@`` and ``.``,
  which NATS reads as a token separator, so :func:`encode_key` escapes every
  byte outside ``[A-Za-z0-9-]`` as ``_XX`` (hex, UTF-8), reversibly.

Whichever side starts first creates the stream, so the publisher
(:mod:`workers.bus_nats_publisher`) and the subscriber
(:mod:`workers.bus_nats_subscriber`) both call :func:`ensure_stream`.
"""

from __future__ import annotations

import asyncio
import logging

import nats
from nats.aio.client import Client as NatsClient
from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.api import StorageType, StreamConfig
from nats.js.errors import NotFoundError

from app.platform.metrics import RECONNECTS
from workers.bus import BusOptions, BusStartError

log = logging.getLogger(__name__)

_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")
# NATS was not reached, as opposed to JetStream refusing a call (an APIError).
UNREACHABLE = (NatsError, OSError, TimeoutError)


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
    except UNREACHABLE as exc:
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


async def close_quietly(nc: NatsClient | None, timeout: float) -> None:
    if nc is None:
        return
    try:
        async with asyncio.timeout(timeout):
            await nc.close()
    except Exception as exc:  # closing must never hang or raise
        log.debug("closing a nats client failed: %r", exc)


async def probe(url: str, max_wait: float) -> None:
    """For /readyz: connect once and ask JetStream for the account info."""
    async def quiet(exc: Exception) -> None:
        pass  # the probe's result says it

    nc = await nats.connect(url, connect_timeout=max(1, int(max_wait)), allow_reconnect=False,
                            max_reconnect_attempts=0, name="mesh-readyz", error_cb=quiet)
    try:
        await nc.jetstream(timeout=max_wait).account_info()
    finally:
        await close_quietly(nc, max_wait)
