"""Waking the outbox relay after a write commits — coalesced, outside the write.

A ``pg_notify`` inside every write transaction made their commits queue behind
Postgres's single notification lock (pgbench: 0.36× the rate without it). The
web process instead notes "something committed" and one background task sends
a NOTIFY for everything committed since its previous one. Under load that is a
handful of NOTIFYs a second instead of one per send; when idle it is one per
send, a few hundred microseconds after the commit. If the process dies in
between, the relay's 1 s sweep picks the rows up.

Nothing calls :meth:`RelayWakeup.wake` by hand: the write unit of work
(app.writes) does, after each commit that appended events or re-queued rows.
It passes the agents that received events; with ``notices`` (the web process's
app.inbox_hub.CommitNotices) they get a commit notice that wakes their parked
long-polls on every web process (ADR 021).

When the notices carry a relay channel, a commit with recipients wakes the
relays in the notices' own pipeline instead (ADR 029): at a trickle every send
then costs the web one Redis pipeline, not that and a NOTIFY round trip on
Postgres. A commit without recipients (re-queued rows), and a notice round that
Redis refuses, still get the NOTIFY.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Collection

import asyncpg

from app.background import cancel
from app.inbox_hub import CommitNotices
from app.metrics import RELAY_WAKEUPS
from app.retry import Backoff
from app.store.outbox import wake_relay

log = logging.getLogger("mesh.wakeup")


class RelayWakeup:
    def __init__(self, pool: asyncpg.Pool, notices: CommitNotices | None = None) -> None:
        self._pool = pool
        self._notices = notices
        self._pending = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.sent = 0
        if notices is not None and notices.relay_channel is not None:
            notices.on_relay_wake_lost = self._pending.set

    def wake(self, recipients: Collection[str] = ()) -> None:
        """Non-blocking: wake the relays for every commit until now, and publish
        the commit notices of ``recipients``."""
        if self._notices is not None and recipients and self._notices.add(recipients):
            return  # the relays hear it in the notices' round (ADR 029)
        self._pending.set()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="relay-wakeup")

    async def stop(self) -> None:
        if self._task is not None:
            if self._pending.is_set():  # don't drop the last wake-up on shutdown
                with contextlib.suppress(Exception):
                    await wake_relay(self._pool)
            await cancel(self._task)

    async def _run(self) -> None:
        backoff = Backoff("relay_wakeup", logger=log)
        while True:
            await self._pending.wait()
            self._pending.clear()
            try:
                await wake_relay(self._pool)
                self.sent += 1
                RELAY_WAKEUPS.labels(via="notify").inc()
                backoff.reset()
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                # Whatever fails here, the relay's sweep still finds the rows.
                await backoff.wait(f"could not wake the relay ({exc})")
