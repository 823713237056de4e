"""Push fan-out: the bus → each recipient's Redis Stream ``inbox:{agent_id}``.

For every record the push worker appends the event to the agent's stream with
the explicit entry id ``{seq}-0`` — Redis refuses an id not above the stream's
last one, which makes "write only if newer" atomic and free — then PUBLISHes a
wake-up for the web processes holding that agent's SSE streams or long-polls,
with the events themselves when they are small (a caught-up stream then needs
no read of its own);
a whole fetched batch is one Redis pipeline (ADR 022). Offsets are committed
only after the writes, so a crash re-delivers and Redis refuses what was
already written.

Run: ``python -m workers.push`` (the Procfile ``push`` process), built and
stopped by :mod:`workers.runtime` like the relay.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from app.delivery import protocol as delivery
from app.domain import event_wire
from app.domain.event_wire import WireEvent
from app.platform import tracing
from app.platform.metrics import DEDUP_HITS, PUSH_WRITTEN
from app.platform.retry import Backoff, retry
from app.platform.settings import Settings
from workers import runtime
from workers.bus import Delivery, Subscriber

log = logging.getLogger("mesh.push")

# What a plain XADD answers for an id not above the stream's last one: the seq
# was written before (a redelivery), so the record is a duplicate.
_ALREADY_WRITTEN = "equal or smaller"


# Records per fetch (one Redis pipeline each), and the longest a written record
# waits for its offset commit (ADR 022: measured against a commit per fetch).
FETCH_RECORDS = 1000
COMMIT_INTERVAL = 0.1


@dataclass(frozen=True, slots=True)
class PushEvent:
    agent_id: str
    # The record's bytes as they came (app.domain.event_wire made them), with the seq
    # and type read from their head: what the stream entry and the notice carry.
    event: WireEvent


def parse(record: Delivery) -> PushEvent | None:
    """The recipient, seq and type of a bus record; None for a record we cannot
    read (logged and skipped: it can never become deliverable by retrying).
    The relay's records are read from their head only (event_wire.peek); the
    body is never parsed, the bytes go to Redis as they came."""
    try:
        head = event_wire.peek(record.value)
        if head is None:  # not encode_event's bytes (a row relayed as written)
            event = json.loads(record.value)
            head = int(event["seq"]), str(event.get("type") or "")
        seq, kind = head
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log.error("push: unreadable record for key %r skipped: %s", record.key, exc)
        return None
    return PushEvent(record.key, WireEvent(seq, kind or "message", record.value))


class Push:
    def __init__(self, settings: Settings, redis: aioredis.Redis, subscriber: Subscriber) -> None:
        self.settings = settings
        self.redis = redis
        self.subscriber = subscriber
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # Cut short by stop(): what is not written is not committed, so redelivered.
        self._backoff = Backoff("push_redis", stop=self._stopping, logger=log)
        self.written = 0
        self.duplicates = 0

    async def write(self, events: Sequence[PushEvent]) -> None:
        """Write a batch in one round trip: one pipeline of an XADD per event
        (the explicit id ``{seq}-0`` is the dedup: Redis refuses an id not above
        the stream's last), then one EXPIRE per stream and one notice per agent,
        carrying that agent's events of the batch when they are small. One notice
        per agent and batch wakes a reader as well as one per event did."""
        if not events:
            return
        maxlen = self.settings.push_stream_maxlen
        pipe = self.redis.pipeline(transaction=False)
        by_agent: dict[str, list[WireEvent]] = {}
        for pushed in events:
            ev = pushed.event
            pipe.xadd(delivery.inbox_stream_key(pushed.agent_id),
                      {delivery.EVENT_FIELD: ev.data, delivery.TYPE_FIELD: ev.type},
                      id=delivery.entry_id(ev.seq), maxlen=maxlen, approximate=True)
            by_agent.setdefault(pushed.agent_id, []).append(ev)
        for agent_id in by_agent:
            pipe.expire(delivery.inbox_stream_key(agent_id), delivery.STREAM_TTL_SECONDS)
        for agent_id, agent_events in by_agent.items():
            # A redelivered event rides along too: a reader drops a seq it handed over.
            pipe.publish(delivery.inbox_channel(agent_id),
                         delivery.event_notice_carrying(agent_id, agent_events))
        async with pipe:
            results = await pipe.execute(raise_on_error=False)
        written = dups = 0
        for result in results[:len(events)]:
            if not isinstance(result, Exception):
                written += 1
            elif _ALREADY_WRITTEN in str(result):
                dups += 1
            else:
                raise result  # e.g. WRONGTYPE or OOM: retried, the batch is idempotent
        for result in results[len(events):]:
            if isinstance(result, Exception):
                raise result
        self.written += written
        PUSH_WRITTEN.inc(written)
        if dups:
            self.duplicates += dups
            DEDUP_HITS.labels(where="push").inc(dups)

    async def handle(self, deliveries: Sequence[Delivery]) -> bool:
        """Write a fetched batch; True once it is in Redis (then it may be committed)."""
        events = [e for e in (parse(d) for d in deliveries) if e is not None]
        with tracing.batch("mesh.push", [d.traceparent for d in deliveries]):
            try:
                await retry(lambda: self.write(events), self._backoff, (RedisError, OSError))
            except (RedisError, OSError):
                return False  # stopping: not committed, so the group re-delivers after a restart
        return True

    async def run(self) -> None:
        """Fetch, write, and commit what was written at most every COMMIT_INTERVAL:
        under a trickle of events a commit per fetch was a broker request per
        event or two. Written but uncommitted records are only redelivered after
        a crash, and Redis refuses them again by seq; a stop commits them."""
        loop = asyncio.get_running_loop()
        written: list[Delivery] = []
        commit_at = 0.0
        try:
            while not self._stopping.is_set():
                wait = 1.0 if not written else max(0.0, commit_at - loop.time())
                deliveries = await self.subscriber.fetch(max_records=FETCH_RECORDS, wait=wait)
                if deliveries:
                    if not await self.handle(deliveries):
                        break
                    if not written:
                        commit_at = loop.time() + COMMIT_INTERVAL
                    written.extend(deliveries)
                if written and loop.time() >= commit_at:
                    await self.subscriber.commit(written)
                    written = []
        finally:
            if written:
                await self.subscriber.commit(written)

    @property
    def task(self) -> asyncio.Task[None] | None:
        return self._task

    async def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name="push-loop")
        log.info("push started: bus=%s group=%s", self.settings.bus_kind, self.settings.push_group)

    async def stop(self) -> None:
        """Let the batch in hand finish and commit, then end the loop."""
        self._stopping.set()
        if self._task is not None:
            await self._task
        log.info("push stopped: %d written, %d duplicates dropped", self.written,
                 self.duplicates)


# --- the process --------------------------------------------------------------------

async def build(rt: runtime.Runtime) -> Push:
    """The push worker of one ``push`` process (or test), from its runtime's resources."""
    subscriber = await rt.subscriber(rt.settings.push_group)
    return Push(rt.settings, await rt.redis(), subscriber)


def main() -> None:
    runtime.main(build, "push")


if __name__ == "__main__":
    main()
