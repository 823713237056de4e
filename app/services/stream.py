"""Strictly ordered reading of one agent's inbox for a live stream (SSE).

Postgres is the history; the agent's Redis Stream (written by the push worker,
app.delivery.protocol) is the fast path, and the events a notice carries the
fastest. The reader first catches up from Postgres, then tails Redis. Whenever
the next entry it sees is not ``last+1`` — the push worker skipped it, Redis lost
it, or a relay published out of order — it fills the gap from Postgres before
going on; carried events are taken only when they go on from ``last`` without a
hole, and what a notice announced beyond the stream's end is read from Postgres
(the notice follows the commit; the stream trails it). So a connection delivers
every seq once, in order: never a skip, never a repeat.

Events are :class:`~app.domain.event_wire.WireEvent`: a Redis entry's bytes are passed
on as the relay encoded them, never parsed and re-encoded here.
"""

from __future__ import annotations

import json
import logging

import asyncpg
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from app.delivery import protocol as delivery
from app.domain.event_wire import WireEvent
from app.platform.metrics import SSE_GAP_FILLS
from app.store import inbox as inbox_store

log = logging.getLogger("mesh.stream")

BATCH = 200


def _from_entry(seq: int, fields: dict[bytes, bytes]) -> WireEvent:
    data = fields[delivery.EVENT_FIELD]
    kind = fields.get(delivery.TYPE_FIELD)
    if kind is None:  # an entry written before the type field existed
        return WireEvent(seq, str(json.loads(data)["type"]), data)
    return WireEvent(seq, kind.decode(), data)


class InboxReader:
    def __init__(self, pool: asyncpg.Pool, redis: aioredis.Redis, agent_id: str,
                 after: int) -> None:
        self.pool = pool
        self.redis = redis
        self.agent_id = agent_id
        self.last = after
        self.catching_up = True
        # Whether the last read may have left events behind (a full batch, a gap
        # Postgres could not close yet, an entry out of order): read again at once.
        # Otherwise what comes next is announced by a notice.
        self.more = True
        self.gap_fills = 0
        # The highest seq a notice announced: committed, so Postgres has it even
        # while the stream does not yet (it trails the commit by the relay's linger).
        self.announced = 0

    async def next_batch(self, *, from_postgres: bool = False,
                         offered: list[WireEvent] | None = None,
                         announced: int = 0) -> list[WireEvent]:
        """The next events after ``last``, in order; [] when none are known yet.

        ``offered`` are the events the notices since the last read carried (the
        waiter's :meth:`~app.delivery.inbox_hub.Waiter.take_offered`): when they go
        on from ``last`` without a hole they are the batch, with no read of Redis;
        when all of them were handed over already there is nothing new to read.
        ``announced`` is the highest seq those notices announced
        (:meth:`~app.delivery.inbox_hub.Waiter.take_announced`): what the stream
        lacks up to it is read from Postgres."""
        # An offered event is committed too: announced by the notice that carried it.
        self.announced = max(self.announced, announced,
                             max((ev.seq for ev in offered or ()), default=0))
        if self.catching_up or from_postgres:
            events = await inbox_store.after(self.pool, self.agent_id, self.last, BATCH)
            self.catching_up = len(events) == BATCH
            return self._advance(events, more=self.catching_up)
        if offered:
            fresh = [ev for ev in offered if ev.seq > self.last]
            if not fresh:
                self.more = False
                return []
            if fresh[0].seq == self.last + 1:
                # A hole inside the offer sets ``more``: the rest is read from the stream.
                return self._advance(fresh, more=False)
        try:
            entries = await self.redis.xrange(delivery.inbox_stream_key(self.agent_id),
                                              min=delivery.entry_id(self.last + 1), max="+",
                                              count=BATCH)
        except (RedisError, OSError) as exc:
            log.warning("stream %s: Redis unavailable (%s); reading Postgres", self.agent_id, exc)
            return await self.next_batch(from_postgres=True)
        out: list[WireEvent] = []
        more = len(entries) == BATCH
        for entry, fields in entries:
            seq = delivery.entry_seq(entry)
            expected = self.last + 1 if not out else out[-1].seq + 1
            if seq < expected:
                continue
            if seq > expected:
                # Missing in Redis: Postgres has it (it committed before this one did).
                filled = await inbox_store.after(self.pool, self.agent_id, expected - 1, BATCH,
                                                 upto=seq - 1)
                self.gap_fills += 1
                SSE_GAP_FILLS.inc()
                out.extend(filled)
                if not filled or filled[-1].seq != seq - 1:
                    more = True  # Postgres could not close the gap yet; resume from there
                    break
            out.append(_from_entry(seq, fields))
        if not out and self.announced > self.last:
            # Announced (offered after a hole, or too large to carry): the events are
            # committed (a notice follows its commit), the stream may not have them
            # yet (it lags the bus path by the relay's linger), Postgres does (ADR 065).
            return await self.next_batch(from_postgres=True)
        # The stream ends short of what was announced: read on, Postgres next.
        return self._advance(out, more=more or (bool(out) and out[-1].seq < self.announced))

    def _advance(self, events: list[WireEvent], *, more: bool) -> list[WireEvent]:
        ordered: list[WireEvent] = []
        for ev in events:
            if ev.seq != self.last + 1:
                more = True  # never skip: the rest comes in a later batch
                break
            ordered.append(ev)
            self.last = ev.seq
        self.more = more
        return ordered
