"""Push fan-out: the bus → each recipient's Redis Stream ``inbox:{agent_id}``.

For every record the push script appends the event to the agent's stream with
the explicit entry id ``{seq}-0`` — Redis refuses an id not above the stream's
last one, which makes "write only if newer" atomic and free — then PUBLISHes a
wake-up for the web processes holding that agent's SSE streams or long-polls.
Offsets are committed only after the writes, so a crash re-delivers and the
script drops what was already written.

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

from app import delivery
from app.metrics import DEDUP_HITS, PUSH_WRITTEN
from app.retry import Backoff, retry
from app.settings import Settings
from workers import runtime
from workers.bus import Delivery, Subscriber

log = logging.getLogger("mesh.push")

# KEYS[1] stream; ARGV: entry id, event bytes, type, maxlen, channel, notice, ttl,
# the event and type field names. Returns 1 when written, 0 when the stream
# already had this seq or a newer one. Names and formats: app.delivery.
PUSH_SCRIPT = """
local ok = redis.pcall('XADD', KEYS[1], 'MAXLEN', '~', ARGV[4], ARGV[1],
                       ARGV[8], ARGV[2], ARGV[9], ARGV[3])
if type(ok) == 'table' and ok.err then
  if string.find(ok.err, 'equal or smaller') then return 0 end
  return redis.error_reply(ok.err)
end
redis.call('EXPIRE', KEYS[1], ARGV[7])
redis.call('PUBLISH', ARGV[5], ARGV[6])
return 1
"""


@dataclass(frozen=True, slots=True)
class PushEvent:
    agent_id: str
    seq: int
    type: str
    # The record's bytes, written to the stream as they came (app.event_wire made them).
    raw: bytes


def parse(record: Delivery) -> PushEvent | None:
    """The recipient, seq and type of a bus record; None for a record we cannot
    read (logged and skipped: it can never become deliverable by retrying)."""
    try:
        event = json.loads(record.value)
        seq = int(event["seq"])
        kind = str(event.get("type") or "message")
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log.error("push: unreadable record for key %r skipped: %s", record.key, exc)
        return None
    return PushEvent(record.key, seq, kind, record.value)


class Push:
    def __init__(self, settings: Settings, redis: aioredis.Redis, subscriber: Subscriber) -> None:
        self.settings = settings
        self.redis = redis
        self.subscriber = subscriber
        self.script = redis.register_script(PUSH_SCRIPT)
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # Cut short by stop(): what is not written is not committed, so redelivered.
        self._backoff = Backoff("push_redis", stop=self._stopping, logger=log)
        self.written = 0
        self.duplicates = 0

    async def write(self, events: Sequence[PushEvent]) -> None:
        """Write a batch in one round trip (a pipeline of script calls)."""
        if not events:
            return
        async with self.redis.pipeline(transaction=False) as pipe:
            for ev in events:
                await self.script(
                    keys=[delivery.inbox_stream_key(ev.agent_id)],
                    args=[delivery.entry_id(ev.seq), ev.raw, ev.type,
                          self.settings.push_stream_maxlen, delivery.NOTIFY_CHANNEL,
                          delivery.event_notice(ev.agent_id, ev.seq),
                          delivery.STREAM_TTL_SECONDS, delivery.EVENT_FIELD,
                          delivery.TYPE_FIELD],
                    client=pipe)
            results = await pipe.execute()
        written = sum(1 for r in results if r == 1)
        self.written += written
        PUSH_WRITTEN.inc(written)
        dups = len(results) - written
        if dups:
            self.duplicates += dups
            DEDUP_HITS.labels(where="push").inc(dups)

    async def handle(self, deliveries: Sequence[Delivery]) -> None:
        events = [e for e in (parse(d) for d in deliveries) if e is not None]
        try:
            await retry(lambda: self.write(events), self._backoff, (RedisError, OSError))
        except (RedisError, OSError):
            return  # stopping: not committed, so the group re-delivers after a restart
        await self.subscriber.commit(deliveries)

    async def run(self) -> None:
        while not self._stopping.is_set():
            deliveries = await self.subscriber.fetch(max_records=1000, wait=1.0)
            if deliveries:
                await self.handle(deliveries)

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
