"""Reading the inbox from Postgres (long-poll), acknowledging it, and the
delivery receipts of both long-poll and SSE."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from app.delivery.inbox_hub import LONG_POLL, InboxHub
from app.domain.event_wire import WireEvent, encode_page, traceparent_of
from app.platform import tracing
from app.platform.background import cancel
from app.platform.errors import not_found, unauthorized
from app.platform.metrics import E2E_LATENCY, LONGPOLL_WAITING
from app.platform.retry import Backoff
from app.services import accounts
from app.services.principals import Agent
from app.store import agents as agents_store
from app.store import inbox as inbox_store

log = logging.getLogger("mesh.receipts")


async def start_cursor(pool: asyncpg.Pool, agent_id: str, after: int | None = None) -> int:
    """Where a read starts: after ``after`` if given, else after the acked
    cursor — never below the agent's floor."""
    row = await inbox_store.cursor(pool, agent_id)
    if row is None:
        raise not_found(f"unknown agent '{agent_id}'")
    start = int(row["acked_seq"]) if after is None else after
    return max(start, int(row["inbox_floor"]))


async def record_delivery(receipts: asyncpg.Pool | ReceiptBatcher, agent_id: str,
                          events: list[WireEvent]) -> None:
    """Receipts and the e2e latency histogram, once per event (first hand-over).

    A :class:`ReceiptBatcher` (the web process's) queues the hand-over and returns
    at once; a pool (no batcher runs: tests, scripts) marks it right away."""
    if not events:
        return
    if not isinstance(receipts, ReceiptBatcher):
        await _mark_now(receipts, agent_id, events)
        return
    if not receipts.add(agent_id, events[0].seq, events[-1].seq):
        await _mark_now(receipts.pool, agent_id, events)


async def _mark_now(pool: asyncpg.Pool, agent_id: str, events: list[WireEvent]) -> None:
    for latency in await inbox_store.mark_delivered(pool, agent_id, events[0].seq,
                                                    events[-1].seq):
        E2E_LATENCY.observe(max(latency, 0.0))




class ReceiptBatcher:
    """Marks a web process's hand-overs ``delivered`` in ONE statement per
    ``flush_ms`` (or per ``flush_max`` hand-overs), off the request path.

    Receipts are best effort (ADR 021): a process that dies between a hand-over
    and the next flush loses at most that interval's marks — those receipts stay
    ``queued`` until the events are handed over again (the client resumes from
    its acked cursor) or acked, which reports them ``acked``. A graceful
    shutdown flushes (:meth:`stop`). While Postgres is unreachable the queue is
    kept, up to ``KEEP_BATCHES`` batches; beyond that the oldest marks are dropped."""

    KEEP_BATCHES = 20
    STOP_SECONDS = 5.0  # the flush at shutdown must not hang on a stuck Postgres

    def __init__(self, pool: asyncpg.Pool, *, flush_ms: int, flush_max: int) -> None:
        self.pool = pool
        self._accepting = False
        self._interval = flush_ms / 1000
        self._max = max(flush_max, 1)
        # (agent_id, first seq, last seq, monotonic time of the hand-over)
        self._queue: list[tuple[str, int, int, float]] = []
        self._queued = asyncio.Event()
        self._full = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def add(self, agent_id: str, first_seq: int, last_seq: int) -> bool:
        """Queue a hand-over; False once stopped (the caller marks it itself)."""
        if not self._accepting:
            return False
        self._queue.append((agent_id, first_seq, last_seq, time.monotonic()))
        self._queued.set()
        if len(self._queue) >= self._max:
            self._full.set()
        return True

    async def start(self) -> None:
        self._accepting = True
        self._task = asyncio.create_task(self._run(), name="receipts")

    async def stop(self) -> None:
        """Stop queueing (later hand-overs are marked directly) and flush the rest."""
        self._accepting = False
        await cancel(self._task)
        self._task = None
        try:
            async with asyncio.timeout(self.STOP_SECONDS):
                await self.flush()
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
            log.warning("could not record %d delivery receipts at shutdown (%s); they stay "
                        "'queued' until handed over again or acked", len(self._queue), exc)

    async def flush(self) -> None:
        batch, self._queue = self._queue, []
        self._queued.clear()
        self._full.clear()
        if not batch:
            return
        now = time.monotonic()
        handovers = [(agent, first, last, max(now - at, 0.0)) for agent, first, last, at in batch]
        try:
            latencies = await inbox_store.mark_delivered_many(self.pool, handovers)
        except BaseException:
            self._requeue(batch)  # marking is idempotent: a retry skips what got through
            raise
        for latency in latencies:
            E2E_LATENCY.observe(max(latency, 0.0))

    def _requeue(self, batch: list[tuple[str, int, int, float]]) -> None:
        queue = batch + self._queue
        keep = self._max * self.KEEP_BATCHES
        if len(queue) > keep:
            log.warning("dropping %d delivery receipts queued while Postgres was unreachable",
                        len(queue) - keep)
            queue = queue[-keep:]
        self._queue = queue
        self._queued.set()

    async def _run(self) -> None:
        backoff = Backoff("receipts", logger=log)
        while True:
            await self._queued.wait()
            # Let the batch fill for one interval, unless it is full already.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval):
                    await self._full.wait()
            try:
                await self.flush()
                backoff.reset()
            except Exception as exc:  # the loop must outlive any failure; the queue is kept
                await backoff.wait(f"could not record delivery receipts ({exc})")


async def read(pool: asyncpg.Pool, hub: InboxHub, me: Agent, *, after: int | None,
               limit: int, wait: float, recheck: float,
               receipts: ReceiptBatcher | None = None) -> bytes:
    """The long-poll body ``{"events":[…],"next_after":N}``, each event's bytes
    embedded as the serializer made them (the same bytes SSE sends)."""
    if after is None:
        after = await start_cursor(pool, me.agent_id)
    events = await inbox_store.after(pool, me.agent_id, after, limit)
    if not events and wait > 0:
        events = await _wait_for_events(pool, hub, me.agent_id, after, limit, wait, recheck,
                                        functools.partial(accounts.still_valid, pool, me))
    await record_delivery(receipts or pool, me.agent_id, events)
    if tracing.enabled and events:
        tracing.delivered((traceparent_of(e.data) for e in events), "long-poll")
    return encode_page(events, events[-1].seq if events else after)


REVOKED = ("the API key behind this token was revoked or its agent deleted while the "
           "long-poll waited; get a new key from the agent's owner")


async def _wait_for_events(pool: asyncpg.Pool, hub: InboxHub, agent_id: str, after: int,
                           limit: int, wait: float, recheck: float,
                           still_valid: Callable[[], Awaitable[bool]]) -> list[WireEvent]:
    deadline = time.monotonic() + wait
    with LONGPOLL_WAITING.track_inprogress():
        async with hub.watch(agent_id, LONG_POLL) as waiter:
            # Re-check after registering: an event committed between the first read
            # and the registration would otherwise wait for the next one.
            events = await inbox_store.after(pool, agent_id, after, limit)
            parked = not events
            while not events:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                # Also re-read every `recheck` seconds: a lost notification (Redis
                # restart, push worker down) delays an answer, it never loses it.
                await waiter.wait(min(remaining, recheck))
                if waiter.auth_changed:
                    # A revocation notice: end now, as an SSE stream does.
                    waiter.auth_changed = False
                    if not await still_valid():
                        raise unauthorized(REVOKED)
                events = await inbox_store.after(pool, agent_id, after, limit)
            # The credentials were checked when the request began, maybe 30 s ago; a
            # revocation whose notice was lost (or raced the registration above) must
            # not hand over what arrived since. One query, only after a park.
            if parked and events and not await still_valid():
                raise unauthorized(REVOKED)
    return events


async def ack(pool: asyncpg.Pool, me: Agent, seq: int) -> dict[str, Any]:
    row = await agents_store.ack(pool, me.agent_id, seq)
    if row is None:
        raise not_found(f"unknown agent '{me.agent_id}'")
    return {"acked_seq": row["acked_seq"], "inbox_seq": row["inbox_seq"]}


async def claim_event(pool: asyncpg.Pool, me: Agent, seq: int, consumer: str,
                      seconds: float, ahead: int = 1) -> dict[str, Any]:
    """A runtime's claim on the event it is about to handle, and on up to ``ahead - 1``
    after it (ADR 050)."""
    through = await agents_store.claim_event(pool, me.agent_id, seq, consumer, seconds, ahead)
    if through is None:
        return {"seq": seq, "claimed": False}
    return {"seq": seq, "claimed": True, "through": through, "lapses_in": seconds}


async def claim(pool: asyncpg.Pool, hub: InboxHub, me: Agent, *, limit: int, wait: float,
                recheck: float, receipts: ReceiptBatcher | None = None) -> list[WireEvent]:
    """The events after the acked cursor, acked as they are handed over: for a client
    with no cursor of its own (a remote MCP client), so that two clients of one agent
    never both get an event. Waits up to ``wait`` seconds for the first one."""
    events = await _claim(pool, me.agent_id, limit)
    if not events and wait > 0:
        deadline = time.monotonic() + wait
        with LONGPOLL_WAITING.track_inprogress():
            async with hub.watch(me.agent_id, LONG_POLL) as waiter:
                events = await _claim(pool, me.agent_id, limit)  # registered: nothing slips by
                while not events:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    await waiter.wait(min(remaining, recheck))
                    # A claim acks what it hands over, so a revocation during the wait
                    # must be seen before the claim, not after (the long-poll checks after).
                    waiter.auth_changed = False
                    if not await accounts.still_valid(pool, me):
                        raise unauthorized(REVOKED)
                    events = await _claim(pool, me.agent_id, limit)
    await record_delivery(receipts or pool, me.agent_id, events)
    return events


async def _claim(pool: asyncpg.Pool, agent_id: str, limit: int) -> list[WireEvent]:
    events = await inbox_store.claim(pool, agent_id, limit)
    if events is None:
        raise not_found(f"unknown agent '{agent_id}'")
    return events
