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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import asyncpg

from app.metrics import RELAY_WAKEUPS
from app.retry import Backoff
from app.store.outbox import wake_relay

log = logging.getLogger("mesh.wakeup")


class RelayWakeup:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._pending = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.sent = 0

    def wake(self) -> None:
        """Non-blocking: ask for a NOTIFY covering every commit until now."""
        self._pending.set()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="relay-wakeup")

    async def stop(self) -> None:
        if self._task is not None:
            if self._pending.is_set():  # don't drop the last wake-up on shutdown
                with contextlib.suppress(Exception):
                    await wake_relay(self._pool)
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        backoff = Backoff("relay_wakeup", logger=log)
        while True:
            await self._pending.wait()
            self._pending.clear()
            try:
                await wake_relay(self._pool)
                self.sent += 1
                RELAY_WAKEUPS.inc()
                backoff.reset()
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                # Whatever fails here, the relay's sweep still finds the rows.
                await backoff.wait(f"could not wake the relay ({exc})")
