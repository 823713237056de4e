"""One lane per target: the scheduling every outbound reader of inboxes shares.

The webhook process (ADR 035; its lanes are an agent's webhook and each A2A push
config) and the A2A bridge (ADR 041; one lane per remote agent) forward inboxes,
in seq order, somewhere outside. Both need the same machinery, kept here once:
each lane is its own task, so a slow or dead remote delays only its own lane; a
lane holds a lease in Postgres, so several processes never serve one lane at the
same time; lanes start on the commit notices the web processes publish already
and on the push worker's event notices, on the channels of every agent the last
sweep found (app.delivery.protocol), on a registration's notice, and on a periodic
sweep, the safety net for notices lost while Redis was away or
sent to another process. A subclass says which lanes there are and what one lane
does with its lease in hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

import asyncpg

from app.delivery import protocol as delivery
from app.delivery.redis_follow import Channels, follow
from app.platform.retry import Backoff, Schedule
from app.platform.settings import Settings
from workers import runtime

# Registrations looked at per sweep.
SWEEP_LIMIT = 50_000
DB_ERRORS = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)

Lane = TypeVar("Lane", bound=Hashable)


def _channels_of(agent_id: str) -> tuple[str, str]:
    """A lane reads Postgres: both the agent's commit and event notices start it."""
    return delivery.commit_channel(agent_id), delivery.inbox_channel(agent_id)


class LaneWorker(Generic[Lane]):
    """Subclasses set ``label`` and ``log`` and implement the hooks below."""

    label = "lanes"
    log = logging.getLogger("mesh.lanes")

    def __init__(self, settings: Settings, pool: asyncpg.Pool, *, lease_seconds: float,
                 sweep_seconds: float, retry: Schedule) -> None:
        self.settings = settings
        self.pool = pool
        self.name = runtime.consumer_name()  # this process's lease owner name
        self.retry = retry
        self._lease = lease_seconds
        self._sweep_seconds = sweep_seconds
        # Whose inbox events wake which lanes, as of the last sweep (and notices since).
        self._known: dict[str, set[Lane]] = {}
        self._due: set[Lane] = set()
        self._lanes: dict[Lane, asyncio.Task[None]] = {}
        self._kicks: dict[Lane, asyncio.Event] = {}  # cut a lane's retry wait short
        self._news: dict[Lane, asyncio.Event] = {}  # new events for a running lane
        self._timers: dict[Lane, asyncio.TimerHandle] = {}
        self._wake = asyncio.Event()
        self._sweep_now = True
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._follower: asyncio.Task[None] | None = None
        # The event and commit notices of every known agent; the registrations'
        # notices of all.
        self._channels = Channels(delivery.NOTIFY_CHANNEL)

    # --- the lanes (the subclass) ---------------------------------------------------

    async def sweep_lanes(self) -> Iterable[tuple[str, Lane, bool]]:
        """Every registration: (the agent whose inbox it reads, its lane, whether
        it has events to forward now)."""
        raise NotImplementedError

    def registration(self, notice: delivery.Notice) -> None:
        """A registration changed (``notice.webhook`` or ``notice.push``): call
        :meth:`register` for each lane it names, or ignore a kind it does not serve."""
        raise NotImplementedError

    async def claim(self, lane: Lane) -> asyncpg.Record | None:
        """Take the lane's lease: its row, or None (held elsewhere, or gone)."""
        raise NotImplementedError

    async def release(self, lane: Lane) -> bool:
        """Give the lease up; True when events came meanwhile (start again)."""
        raise NotImplementedError

    async def serve(self, lane: Lane, row: asyncpg.Record) -> None:
        """Forward the lane's events with its lease held (``row``: the claim's)."""
        raise NotImplementedError

    def lane_name(self, lane: Lane) -> str:
        return str(lane)

    async def after_sweep(self) -> None:
        """Called after each sweep (metrics)."""

    async def stopped(self) -> None:
        """Called at the end of :meth:`stop`, after the lanes ended."""

    # --- what starts a lane -------------------------------------------------------

    def poke(self, lane: Lane) -> None:
        news = self._news.get(lane)
        if news is not None:
            news.set()  # a running lane reads again
        self._due.add(lane)  # and if it just ended, it starts again
        self._wake.set()

    def register(self, agent_id: str, lane: Lane) -> None:
        """A new or replaced registration: serve it now, a pending retry included."""
        self._known.setdefault(agent_id, set()).add(lane)
        for channel in _channels_of(agent_id):
            self._channels.want(channel)
        kick = self._kicks.get(lane)
        if kick is not None:
            kick.set()  # retry now, not after the backoff
        self.poke(lane)

    def _notice(self, data: bytes) -> None:
        notice = delivery.parse_notice(data)
        if notice.webhook or notice.push:
            self.registration(notice)
        elif notice.kind in ("event", "commit"):
            for lane in self._known.get(notice.agent_id, ()):
                self.poke(lane)

    def _resubscribed(self) -> None:
        self._sweep_now = True  # notices published meanwhile are lost: look at Postgres
        self._wake.set()

    def later(self, lane: Lane, seconds: float) -> None:
        """Start the lane again in ``seconds`` (a cool-down, a long retry)."""
        old = self._timers.pop(lane, None)
        if old is not None:
            old.cancel()
        loop = asyncio.get_running_loop()
        self._timers[lane] = loop.call_later(seconds, self._timer_fired, lane)

    def _timer_fired(self, lane: Lane) -> None:
        self._timers.pop(lane, None)
        self.poke(lane)

    async def sweep(self) -> None:
        known: dict[str, set[Lane]] = {}
        for agent_id, lane, due in await self.sweep_lanes():
            known.setdefault(agent_id, set()).add(lane)
            if due:
                self.poke(lane)
        self._known = known
        self._channels.want_exactly({c for agent_id in known for c in _channels_of(agent_id)})
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
            for lane in list(self._due):
                if lane not in self._lanes:
                    self._due.discard(lane)
                    self._start_lane(lane)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(next_sweep - loop.time(), 0.0)):
                    await self._wake.wait()

    def _start_lane(self, lane: Lane) -> None:
        task = asyncio.create_task(self._lane(lane), name=f"{self.label}:{self.lane_name(lane)}")
        self._lanes[lane] = task
        self._kicks[lane] = asyncio.Event()
        self._news[lane] = asyncio.Event()

        def done(_: asyncio.Task[None]) -> None:
            self._lanes.pop(lane, None)
            self._kicks.pop(lane, None)
            self._news.pop(lane, None)
            self._wake.set()  # a poke that came while it ran starts it again

        task.add_done_callback(done)

    async def _lane(self, lane: Lane) -> None:
        try:
            row = await self.claim(lane)
            if row is None:
                return  # another process serves it, or the registration is gone
            try:
                await self.serve(lane, row)
            finally:
                if await self.release(lane):
                    self.poke(lane)  # committed while we finished: go on
        except Exception as exc:  # a lane must never end silently: try again later
            # The lease (if held) lapses by itself; nothing was acked that was not sent.
            self.log.warning("%s %s: round failed (%s: %s); retrying shortly", self.label,
                             self.lane_name(lane), type(exc).__name__, exc)
            self.later(lane, self.retry.delay(1))

    # --- waits inside a lane --------------------------------------------------------

    def news(self, lane: Lane) -> asyncio.Event:
        """Set by each poke of the running lane: clear it *before* reading the
        lane's events, so that one committed after the read is not missed."""
        return self._news.get(lane) or asyncio.Event()

    async def pause(self, lane: Lane, seconds: float) -> None:
        """A retry's backoff; ended early by a stop or a new registration."""
        kick = self._kicks.get(lane) or asyncio.Event()
        kick.clear()
        await self._first(kick, seconds)

    async def linger(self, lane: Lane, seconds: float,
                     others: set[asyncio.Task[None]] | None = None) -> bool:
        """Caught up: wait for news of the lane (True: it came), a stop, one of
        ``others`` to end, or ``seconds``, whichever comes first."""
        news = self.news(lane)
        if seconds > 0 and not self.stopping:
            await self._first(news, seconds, others)
        return news.is_set() and not self.stopping

    async def _first(self, event: asyncio.Event, seconds: float,
                     others: set[asyncio.Task[None]] | None = None) -> None:
        waits = {asyncio.ensure_future(self._stopping.wait()), asyncio.ensure_future(event.wait())}
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
        # Lanes read Postgres: the commit notices start them before the push worker's.
        self._follower = asyncio.create_task(follow(
            self.settings.redis_url, self._channels,
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
