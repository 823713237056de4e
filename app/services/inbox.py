"""Reading the inbox from Postgres (long-poll) and acknowledging it."""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from app.errors import not_found, unauthorized
from app.event_wire import WireEvent, encode_page
from app.inbox_hub import InboxHub
from app.metrics import E2E_LATENCY, LONGPOLL_WAITING
from app.services import accounts
from app.services.principals import Agent
from app.store import agents as agents_store
from app.store import inbox as inbox_store


async def start_cursor(pool: asyncpg.Pool, agent_id: str, after: int | None = None) -> int:
    """Where a read starts: after ``after`` if given, else after the acked
    cursor — never below the agent's floor."""
    row = await inbox_store.cursor(pool, agent_id)
    if row is None:
        raise not_found(f"unknown agent '{agent_id}'")
    start = int(row["acked_seq"]) if after is None else after
    return max(start, int(row["inbox_floor"]))


async def record_delivery(pool: asyncpg.Pool, agent_id: str, events: list[WireEvent]) -> None:
    """Receipts and the e2e latency histogram, once per event (first hand-over)."""
    if not events:
        return
    for latency in await inbox_store.mark_delivered(pool, agent_id, events[0].seq,
                                                    events[-1].seq):
        E2E_LATENCY.observe(max(latency, 0.0))


async def read(pool: asyncpg.Pool, hub: InboxHub, me: Agent, *, after: int | None,
               limit: int, wait: float) -> bytes:
    """The long-poll body ``{"events":[…],"next_after":N}``, each event's bytes
    embedded as the serializer made them (the same bytes SSE sends)."""
    if after is None:
        after = await start_cursor(pool, me.agent_id)
    events = await inbox_store.after(pool, me.agent_id, after, limit)
    if not events and wait > 0:
        events = await _wait_for_events(pool, hub, me.agent_id, after, limit, wait,
                                        functools.partial(accounts.still_valid, pool, me))
    await record_delivery(pool, me.agent_id, events)
    return encode_page(events, events[-1].seq if events else after)


REVOKED = ("the API key behind this token was revoked or its agent deleted while the "
           "long-poll waited; get a new key from the agent's owner")


async def _wait_for_events(pool: asyncpg.Pool, hub: InboxHub, agent_id: str, after: int,
                           limit: int, wait: float,
                           still_valid: Callable[[], Awaitable[bool]]) -> list[WireEvent]:
    deadline = time.monotonic() + wait
    with LONGPOLL_WAITING.track_inprogress():
        async with hub.watch(agent_id) as waiter:
            # Re-check after registering: an event committed between the first read
            # and the registration would otherwise wait for the next one.
            events = await inbox_store.after(pool, agent_id, after, limit)
            parked = not events
            while not events:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                # Also re-read every few seconds: a lost notification (Redis restart,
                # push worker down) delays an answer, it never loses it.
                await waiter.wait(min(remaining, 5.0))
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
