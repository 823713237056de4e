"""Scenario 7: webhook delivery (ADR 035) — one ``webhook`` process.

* **Throughput**: recipients' inboxes are filled through the API first (no webhook
  yet), then every recipient gets a webhook to a receiver in this process in ONE
  transaction; the clock starts at its commit and stops when every recipient's
  acked cursor reached its inbox. Baseline: the same number of POSTs of the same
  bodies straight from this process to the same receiver, one lane per recipient
  (one request in flight each, as the worker's lanes), no mesh in between — the
  HTTP floor the worker stands on.
* **Latency**: open loop at ``rate`` msg/s to recipients with webhooks; e2e = the
  receiver read the POST − the send was written (one clock, one process).
  Baseline: the same open loop to the same recipients on SSE, just before.

The receiver answers 204 at once and checks order per agent (seq must rise), so
missing, duplicate and reordered deliveries are counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import asyncpg
import httpx
import redis.asyncio as aioredis

from app.delivery import protocol as delivery
from app.delivery.webhook_signing import Sealer, new_secret
from bench.client import Client, HttpError, now
from bench.load import Agent, Cast, new_message_id, send
from bench.stats import Dist


@dataclass
class Hit:
    path: str  # each agent's webhook has its own
    seq: int
    message_id: str | None
    at: float
    body: bytes


@dataclass
class Receiver:
    """A bare HTTP/1.1 keep-alive receiver: answers 204, keeps what it got."""

    on_hit: Callable[[Hit], None] | None = None
    check_order: bool = True
    hits: int = 0
    last_seq: dict[str, int] = field(default_factory=dict)
    reordered: int = 0
    port: int = 0
    _server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, backlog=512)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.split(b"\r\n")
                path = lines[0].split(b" ")[1].decode()
                length = 0
                for line in lines[1:]:
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                body = await reader.readexactly(length)
                at = now()
                writer.write(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
                self._got(path, body, at)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    def _got(self, path: str, body: bytes, at: float) -> None:
        """Order is checked per path: each agent's webhook has its own."""
        self.hits += 1
        if not self.check_order:
            return
        event = json.loads(body)
        seq = int(event["seq"])
        if seq <= self.last_seq.get(path, -1):
            self.reordered += 1
        self.last_seq[path] = seq
        message = (event.get("payload") or {}).get("message") or {}
        if self.on_hit is not None:
            self.on_hit(Hit(path, seq, message.get("message_id"), at, body))


async def register(database_url: str, redis_url: str, sealer: Sealer, agent_ids: list[str],
                   url: str, *, skip_backlog: bool) -> float:
    """Webhooks for ``agent_ids`` in one transaction (cursor moved to the inbox
    first when ``skip_backlog``); returns perf_counter at the commit."""
    conn = await asyncpg.connect(database_url)
    try:
        async with conn.transaction():
            if skip_backlog:
                await conn.execute("UPDATE agents SET acked_seq = inbox_seq "
                                   "WHERE agent_id = ANY($1)", agent_ids)
            await conn.executemany(
                "INSERT INTO agent_webhooks (agent_id, url, secret) VALUES ($1, $2, $3) "
                "ON CONFLICT (agent_id) DO UPDATE SET url = EXCLUDED.url",
                [(a, f"{url}/{a}", sealer.seal(new_secret())) for a in agent_ids])
        committed = now()
    finally:
        await conn.close()
    r = aioredis.from_url(redis_url)
    try:
        for a in agent_ids:
            await r.publish(delivery.NOTIFY_CHANNEL, delivery.webhook_notice(a))
    finally:
        await r.aclose()
    return committed


async def unregister(database_url: str, agent_ids: list[str]) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("DELETE FROM agent_webhooks WHERE agent_id = ANY($1)", agent_ids)
    finally:
        await conn.close()


async def pending(conn: asyncpg.Connection, agent_ids: list[str]) -> int:
    return int(await conn.fetchval(
        "SELECT COALESCE(sum(GREATEST(inbox_seq - GREATEST(acked_seq, inbox_floor), 0)), 0) "
        "FROM agents WHERE agent_id = ANY($1)", agent_ids))


@dataclass
class Throughput:
    events: int
    seconds: float
    reordered: int
    received: int

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds else math.nan


async def fill(client: Client, cast: Cast, per_recipient: int, concurrency: int = 32) -> int:
    """``per_recipient`` sends to each recipient, closed loop; returns how many got a 201."""
    jobs = [(cast.senders[i % len(cast.senders)], r) for r in cast.recipients
            for i in range(per_recipient)]
    done = 0
    it = iter(jobs)

    async def lane() -> None:
        nonlocal done
        for sender, recipient in it:
            with contextlib.suppress(HttpError):
                resp = await send(client, sender, recipient.agent_id, new_message_id())
                done += resp.status == 201

    await asyncio.gather(*(lane() for _ in range(concurrency)))
    return done


async def throughput(database_url: str, redis_url: str, sealer: Sealer,
                     recipients: list[Agent], timeout: float = 240.0) -> Throughput:
    rx = Receiver()
    await rx.start()
    ids = [r.agent_id for r in recipients]
    conn = await asyncpg.connect(database_url)
    try:
        total = await pending(conn, ids)
        start = await register(database_url, redis_url, sealer, ids, rx.url, skip_backlog=False)
        while (left := await pending(conn, ids)) > 0:
            if now() - start > timeout:
                raise TimeoutError(f"webhooks: {left} of {total} events still unacked")
            await asyncio.sleep(0.01)
        seconds = now() - start
    finally:
        await conn.close()
        await unregister(database_url, ids)
        await rx.stop()
    return Throughput(total, seconds, rx.reordered, rx.hits)


async def post_floor(bodies: list[bytes], lanes: int) -> Throughput:
    """The same POSTs from this process straight to a receiver, ``lanes`` at a time."""
    rx = Receiver(check_order=False)
    await rx.start()
    chunks = [bodies[i::lanes] for i in range(lanes)]

    async def lane(chunk: list[bytes]) -> None:
        async with httpx.AsyncClient(trust_env=False, timeout=10) as http:
            for body in chunk:
                await http.post(rx.url, content=body,
                                headers={"content-type": "application/json"})

    start = now()
    try:
        await asyncio.gather(*(lane(c) for c in chunks))
        seconds = now() - start
    finally:
        await rx.stop()
    return Throughput(len(bodies), seconds, rx.reordered, rx.hits)


async def sample_bodies(database_url: str, n: int) -> list[bytes]:
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch("SELECT payload::text AS p FROM outbox_events "
                                "WHERE payload->>'type' = 'task.created' ORDER BY id DESC "
                                "LIMIT $1", n)
    finally:
        await conn.close()
    return [r["p"].encode() for r in rows]


@dataclass
class WebhookLatency:
    rate: float
    seconds: float
    offered: int = 0
    accepted: int = 0
    e2e: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    missing: int = 0
    duplicates: int = 0
    reordered: int = 0

    @property
    def e2e_dist(self) -> Dist:
        return Dist.of_seconds(self.e2e)


async def latency(database_url: str, redis_url: str, sealer: Sealer, cast: Cast,
                  client: Client, *, rate: float, seconds: float,
                  settle: float = 15.0) -> WebhookLatency:
    result = WebhookLatency(rate, seconds)
    sent_at: dict[str, float] = {}
    seen: set[str] = set()
    got_all = asyncio.Event()
    sending_done = False

    def on_hit(hit: Hit) -> None:
        mid = hit.message_id
        if mid is None or mid not in sent_at:
            return
        if mid in seen:
            result.duplicates += 1
            return
        seen.add(mid)
        result.e2e.append(hit.at - sent_at[mid])
        if sending_done and len(seen) >= result.accepted:
            got_all.set()

    rx = Receiver(on_hit=on_hit)
    await rx.start()
    ids = [r.agent_id for r in cast.recipients]
    await register(database_url, redis_url, sealer, ids, rx.url, skip_backlog=True)
    pairs = [(s, r) for s in cast.senders for r in cast.recipients]

    async def one(sender: Agent, recipient: Agent, mid: str) -> None:
        sent_at[mid] = now()
        try:
            resp = await send(client, sender, recipient.agent_id, mid)
        except HttpError as exc:
            result.errors.append(str(exc))
            return
        if resp.status == 201:
            result.accepted += 1
        else:
            sent_at.pop(mid, None)
            result.errors.append(f"HTTP {resp.status}")

    try:
        await asyncio.sleep(0.5)  # the worker's lanes for the new registrations settle
        tasks = []
        total = math.floor(rate * seconds)
        start = now() + 0.05
        for i in range(total):
            delay = start + i / rate - now()
            if delay > 0:
                await asyncio.sleep(delay)
            sender, recipient = pairs[i % len(pairs)]
            tasks.append(asyncio.create_task(one(sender, recipient, new_message_id())))
            result.offered += 1
        await asyncio.gather(*tasks)
        sending_done = True
        if len(seen) >= result.accepted:
            got_all.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(got_all.wait(), settle)
    finally:
        await unregister(database_url, ids)
        await rx.stop()
    result.missing = result.accepted - len(seen)
    result.reordered = rx.reordered
    return result
