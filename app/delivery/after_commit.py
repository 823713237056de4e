"""The web process's one after-commit signal: commit notices and the relays' wake-up.

The write unit of work (app.store.writes) calls :meth:`AfterCommit.wake` after each
commit that appended inbox events or re-queued outbox rows; it never blocks.
One background task then sends everything noted since its previous round:

* a **commit notice** per recipient (app.delivery.protocol.commit_notice, on the
  recipient's commit channel), so its parked long-polls on any web process and its
  webhook and A2A-bridge lanes start at once (ADR 021, ADR 063) — this process's own
  long-polls are woken in :meth:`wake` already, through the hub;
* an **event notice carrying the committed events** per recipient (on its event
  channel, app.delivery.protocol.event_notice_carrying), so its open streams on any
  web process hand them over at once, without waiting for relay → bus → push
  worker (ADR 065). The push worker's notice for the same events comes later and
  is dropped by seq; a notice lost or out of order only delays: a reader never
  skips a seq, and reads the stream or Postgres for one it was not handed;
* the **relays' wake-up**: in the same Redis pipeline when there is a relay
  channel (ADR 029: at a trickle a send then costs the web one Redis round
  trip), otherwise — and for a commit without recipients, and for a round
  Redis refuses — one Postgres NOTIFY for everything committed since the last.

A ``pg_notify`` inside every write transaction would make their commits queue
behind Postgres's single notification lock (pgbench: 0.36× the rate without
it); coalescing here makes that a handful of NOTIFYs a second under load. If
the process dies between commit and round, the relay's 1 s sweep finds the rows
and long-polls re-read on their own timer: a lost signal delays, never loses.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import asyncpg
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from app.delivery.inbox_hub import InboxHub
from app.delivery.protocol import (
    commit_channel,
    commit_notice,
    event_notice_carrying,
    inbox_channel,
)
from app.domain.event_wire import wire_event
from app.platform.background import cancel
from app.platform.metrics import RELAY_WAKEUPS
from app.platform.retry import Backoff
from app.store.events import relay_wakeup_message
from app.store.outbox import wake_relay

log = logging.getLogger("mesh.after_commit")

_POSTGRES_ERRORS = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)


class AfterCommit:
    STOP_SECONDS = 1.0  # a last round at shutdown must not hang on a stuck Redis

    def __init__(self, pool: asyncpg.Pool, redis: aioredis.Redis | None = None,
                 hub: InboxHub | None = None, relay_channel: str | None = None) -> None:
        self._pool = pool
        self._redis = redis
        self._hub = hub
        # Relays hear the Redis round only when there is a Redis and a channel.
        self._relay_channel = relay_channel if redis is not None else None
        self._recipients: set[str] = set()
        # Committed inbox rows by recipient since the last round, encoded in the round.
        self._carried: dict[str, list[Mapping[str, Any]]] = {}
        self._events = 0  # events committed since the last round, for the relays
        self._notify = False  # a Postgres NOTIFY is owed to the relays
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.notifies = 0  # NOTIFYs sent (tests count them)

    def wake(self, recipients: Collection[str] = (),
             written: Sequence[Mapping[str, Any]] = ()) -> None:
        """Non-blocking: the outbox changed; ``recipients`` received inbox events,
        ``written`` are committed inbox rows (app.store.events.WRITTEN) whose events
        the round carries to their readers (only with Redis: the round publishes)."""
        for agent_id in recipients:
            if self._hub is not None:
                self._hub.wake(agent_id, committed=True)
        if self._redis is not None:
            self._recipients.update(recipients)
            self._events += len(recipients)
            for row in written:
                self._carried.setdefault(row["agent_id"], []).append(row)
        if not recipients or self._relay_channel is None:
            self._notify = True
        self._ready.set()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="after-commit")

    async def stop(self) -> None:
        await cancel(self._task)
        self._task = None
        # The last commits' long-polls and relays: one bounded round.
        with contextlib.suppress(RedisError, *_POSTGRES_ERRORS, TimeoutError):
            async with asyncio.timeout(self.STOP_SECONDS):
                await self._round()

    async def _round(self) -> None:
        agents, self._recipients = self._recipients, set()
        events, self._events = self._events, 0
        # Not kept for a retry: the push worker's notice carries them too.
        carried, self._carried = self._carried, {}
        try:
            if agents:
                await self._publish(agents, events, carried)
        except BaseException:
            self._recipients |= agents  # still worth waking once Redis answers
            self._events += events
            if self._relay_channel is not None:
                self._notify = True  # the rows are committed: wake the relays now
            await self._notify_relays()
            raise
        await self._notify_relays()

    async def _publish(self, agents: set[str], events: int,
                       carried: dict[str, list[Mapping[str, Any]]]) -> None:
        assert self._redis is not None
        async with self._redis.pipeline(transaction=False) as pipe:
            for agent_id in agents:
                pipe.publish(commit_channel(agent_id), commit_notice(agent_id))
            for agent_id, rows in carried.items():
                rows.sort(key=lambda row: row["seq"])  # commits may end out of seq order
                pipe.publish(inbox_channel(agent_id),
                             event_notice_carrying(agent_id, [wire_event(r) for r in rows]))
            if self._relay_channel is not None:
                pipe.publish(self._relay_channel, relay_wakeup_message(events))
            await pipe.execute()
        if self._relay_channel is not None:
            RELAY_WAKEUPS.labels(via="redis").inc()

    async def _notify_relays(self) -> None:
        if not self._notify:
            return
        self._notify = False
        try:
            await wake_relay(self._pool)
        except BaseException:
            self._notify = True
            raise
        self.notifies += 1
        RELAY_WAKEUPS.labels(via="notify").inc()

    async def _run(self) -> None:
        backoff = Backoff("after_commit", logger=log)
        while True:
            await self._ready.wait()
            self._ready.clear()
            try:
                await self._round()
                backoff.reset()
            except (RedisError, *_POSTGRES_ERRORS) as exc:
                # Whatever fails here, the relay's sweep and the long-polls'
                # re-reads still find the rows.
                self._ready.set()
                await backoff.wait(f"could not signal after a commit ({exc})")
