"""One lane per agent: the scheduling every outbound reader of inboxes shares.

The webhook process (ADR 035) and the A2A bridge (ADR 041) each forward some
agents' inboxes, in seq order, somewhere outside. Both need the same machinery,
kept here once: each agent has its own task (a lane), so a slow or dead remote
delays only its own agent; a lane holds the agent's lease
(app.store.leases.AgentLeases), so several processes never serve one agent at
the same time; lanes start on the commit and event notices every web process
and push worker publish already (app.delivery.protocol), on a registration's notice,
and on a periodic sweep, the safety net for notices lost while Redis was away
or sent to another process. A subclass says what one lane does with the lease
in hand (:meth:`LaneWorker.serve`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import asyncpg

from app.delivery import protocol as delivery
from app.delivery.redis_follow import follow
from app.platform.retry import Backoff, Schedule
from app.platform.settings import Settings
from app.store.leases import AgentLeases
from workers import runtime

# Registrations looked at per sweep.
SWEEP_LIMIT = 50_000
DB_ERRORS = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)


class LaneWorker:
    """Subclasses set ``label`` and ``log`` and implement :meth:`serve`."""

    label = "lanes"
    log = logging.getLogger("mesh.lanes")

    def __init__(self, settings: Settings, pool: asyncpg.Pool, leases: AgentLeases, *,
                 lease_seconds: float, sweep_seconds: float, retry: Schedule) -> None:
        self.settings = settings
        self.pool = pool
        self.leases = leases
        self.name = runtime.consumer_name()  # this process's lease owner name
        self.retry = retry
        self._lease = lease_seconds
        self._sweep_seconds = sweep_seconds
        self._known: set[str] = set()  # agents with a registration, as of the last sweep
        self._due: set[str] = set()
        self._lanes: dict[str, asyncio.Task[None]] = {}
        self._kicks: dict[str, asyncio.Event] = {}  # cut a lane's retry wait short
        self._nudges: dict[str, asyncio.Event] = {}  # new events for a running lane
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._wake = asyncio.Event()
        self._sweep_now = True
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._follower: asyncio.Task[None] | None = None

    # --- what one lane does (the subclass) ------------------------------------------

    async def serve(self, agent_id: str, row: asyncpg.Record) -> None:
        """Forward the agent's events with its lease held (``row``: the claim's lane)."""
        raise NotImplementedError

    async def after_sweep(self) -> None:
        """Called after each sweep (metrics)."""

    async def stopped(self) -> None:
        """Called at the end of :meth:`stop`, after the lanes ended."""

    # --- what starts a lane -------------------------------------------------------

    def poke(self, agent_id: str) -> None:
        self._due.add(agent_id)
        nudge = self._nudges.get(agent_id)
        if nudge is not None:
            nudge.set()
        self._wake.set()

    def _notice(self, data: bytes) -> None:
        notice = delivery.parse_notice(data)
        if notice.webhook:  # a registration changed (a webhook, an A2A remote)
            self._known.add(notice.agent_id)
            kick = self._kicks.get(notice.agent_id)
            if kick is not None:
                kick.set()  # a new registration: retry now, not after the backoff
            self.poke(notice.agent_id)
        elif notice.kind in ("event", "commit") and notice.agent_id in self._known:
            self.poke(notice.agent_id)

    def _resubscribed(self) -> None:
        self._sweep_now = True  # notices published meanwhile are lost: look at Postgres
        self._wake.set()

    def later(self, agent_id: str, seconds: float) -> None:
        """Start the agent's lane again in ``seconds`` (a cool-down, a long retry)."""
        old = self._timers.pop(agent_id, None)
        if old is not None:
            old.cancel()
        loop = asyncio.get_running_loop()
        self._timers[agent_id] = loop.call_later(seconds, self._timer_fired, agent_id)

    def _timer_fired(self, agent_id: str) -> None:
        self._timers.pop(agent_id, None)
        self.poke(agent_id)

    async def sweep(self) -> None:
        rows = await self.leases.sweep(self.pool, SWEEP_LIMIT)
        self._known = {r["agent_id"] for r in rows}
        for row in rows:
            if row["due"]:
                self.poke(row["agent_id"])
        await self.after_sweep()

    # --- the main loop ------------------------------------------------------------

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        backoff = Backoff(f"{self.label}_sweep", stop=self._stopping, logger=self.log)
        next_sweep = 0.0
        while not self._stopping.is_set():
            if self._sweep_now or loop.time() >= next_sweep:
                self._sweep_now = False
                try:
                    await self.sweep()
                    backoff.reset()
                except DB_ERRORS as exc:
                    await backoff.wait(f"could not sweep the {self.label} registrations ({exc})")
                    continue
                next_sweep = loop.time() + self._sweep_seconds
            for agent_id in list(self._due):
                if agent_id not in self._lanes:
                    self._due.discard(agent_id)
                    self._start_lane(agent_id)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(next_sweep - loop.time(), 0.0)):
                    await self._wake.wait()

    def _start_lane(self, agent_id: str) -> None:
        task = asyncio.create_task(self._lane(agent_id), name=f"{self.label}:{agent_id}")
        self._lanes[agent_id] = task
        self._kicks[agent_id] = asyncio.Event()
        self._nudges[agent_id] = asyncio.Event()

        def done(_: asyncio.Task[None]) -> None:
            self._lanes.pop(agent_id, None)
            self._kicks.pop(agent_id, None)
            self._nudges.pop(agent_id, None)
            self._wake.set()  # a poke that came while it ran starts it again

        task.add_done_callback(done)

    async def _lane(self, agent_id: str) -> None:
        try:
            row = await self.leases.claim(self.pool, agent_id, self.name, self._lease)
            if row is None:
                return  # another process serves it, or the registration is gone
            try:
                await self.serve(agent_id, row)
            finally:
                if await self.leases.release(self.pool, agent_id, self.name):
                    self.poke(agent_id)  # committed while we finished: go on
        except Exception as exc:  # a lane must never end silently: try again later
            # The lease (if held) lapses by itself; nothing was acked that was not sent.
            self.log.warning("%s %s: round failed (%s: %s); retrying shortly", self.label,
                             agent_id, type(exc).__name__, exc)
            self.later(agent_id, self.retry.delay(1))

    async def renew(self, agent_id: str) -> asyncpg.Record | None:
        return await self.leases.renew(self.pool, agent_id, self.name, self._lease)

    async def pause(self, agent_id: str, seconds: float) -> None:
        """A retry's backoff; ended early by a stop or a new registration."""
        kick = self._kicks.get(agent_id) or asyncio.Event()
        kick.clear()
        stop = asyncio.ensure_future(self._stopping.wait())
        kicked = asyncio.ensure_future(kick.wait())
        try:
            await asyncio.wait({stop, kicked}, timeout=seconds,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            kicked.cancel()

    async def idle(self, agent_id: str, seconds: float,
                   others: set[asyncio.Task[None]] | None = None) -> None:
        """A running lane waits for new events of its agent (a poke), a stop, one
        of ``others`` to end, or ``seconds``, whichever comes first."""
        nudge = self._nudges.get(agent_id) or asyncio.Event()
        nudge.clear()
        waits = {asyncio.ensure_future(self._stopping.wait()),
                 asyncio.ensure_future(nudge.wait())}
        try:
            await asyncio.wait(waits | (others or set()), timeout=seconds,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def lease_seconds(self) -> float:
        return self._lease

    # --- the worker ---------------------------------------------------------------

    @property
    def task(self) -> asyncio.Task[None] | None:
        return self._task

    async def start(self) -> None:
        self._follower = asyncio.create_task(follow(
            self.settings.redis_url, delivery.NOTIFY_CHANNEL,
            Backoff(f"{self.label}_notices", stop=self._stopping, logger=self.log),
            on_message=self._notice, on_subscribed=self._resubscribed),
            name=f"{self.label}-notices")
        self._task = asyncio.create_task(self.run(), name=f"{self.label}-loop")

    async def stop(self) -> None:
        """Finish the calls in flight (each bounded by a timeout), give the leases
        up, then end the loop."""
        self._stopping.set()
        self._wake.set()
        if self._task is not None:
            await self._task
        lanes = list(self._lanes.values())
        if lanes:
            await asyncio.gather(*lanes, return_exceptions=True)
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follower
        await self.stopped()
