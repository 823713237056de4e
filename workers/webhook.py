"""Webhook delivery: each webhook agent's inbox POSTed in seq order (ADR 035).

Postgres is the source: an agent's events are read after its acked cursor and
POSTed one at a time, each signed per Standard Webhooks (app.delivery.webhook_signing);
a 2xx within ``MESH_WEBHOOK_TIMEOUT_SECONDS`` acks it through the same ack
service as ``POST /v1/mesh/inbox/ack``, anything else is retried with backoff
and jitter (app.platform.retry) while that agent's later events wait. After
``MESH_WEBHOOK_BREAKER_FAILURES`` failures in a row the agent's breaker opens:
no calls until a half-open probe after a cool-down that doubles with each
failed probe. Nothing is dropped: unacked events stay in the inbox for SSE,
long-poll, or the webhook once it answers again.

Each agent has its own task (a lane), so a slow or dead endpoint delays only its
own agent; at most ``MESH_WEBHOOK_CONCURRENCY`` POSTs are in flight at once. A
lane holds a lease on the agent's ``agent_webhooks`` row, so several webhook
processes never deliver one agent at the same time. Lanes start on the commit
and event notices every web process and push worker publish already
(app.delivery.protocol), on a registration's notice, and on a periodic sweep, the
safety net for notices lost while Redis was away or sent to another process.

The same loop delivers A2A push-notification configs (ADR 039): a config is
another channel (workers.webhook_channels) — one task's events in its agent's
inbox, as A2A StreamResponses, under the config's own cursor, lease and
breaker — with the same retries, breaker and SSRF-guarded POST.

Run: ``python -m workers.webhook`` (the Procfile ``webhook`` process).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import aiohttp
import asyncpg

from app.delivery import protocol as delivery
from app.delivery.redis_follow import follow
from app.delivery.webhook_signing import Sealer
from app.platform.metrics import WEBHOOK_BREAKERS_OPEN
from app.platform.retry import Backoff, Schedule
from app.platform.settings import Settings
from app.store import push_configs as push_store
from app.store import webhooks as webhooks_store
from workers import runtime
from workers.webhook_channels import AgentWebhooks, Channel, Item, LaneKey, TaskPushes
from workers.webhook_post import Outcome, Poster

log = logging.getLogger("mesh.webhook")

# Events read from Postgres per round of one lane.
BATCH = 100
# A lane's 2xxs are written in one statement per run of POSTs: one commit (one WAL
# flush) for up to ACK_EVERY of them rather than one each, which was half of a
# delivery's Postgres and asyncpg cost. ACK_WITHIN_SECONDS bounds how far the
# acked cursor trails the POSTs behind a slow receiver (and keeps the lease
# renewed); a crash re-sends at most the run not yet written, which the receiver
# recognises by ``webhook-id``, as after any crash between a 2xx and its ack.
ACK_EVERY = 32
ACK_WITHIN_SECONDS = 0.2
# Webhooks looked at per sweep.
SWEEP_LIMIT = 50_000
_DB_ERRORS = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)


class WebhookWorker:
    """The delivery loop, for every channel: lanes, leases, retries, the breaker."""

    def __init__(self, settings: Settings, pool: asyncpg.Pool) -> None:
        self.settings = settings
        self.pool = pool
        self.name = runtime.consumer_name()  # this process's lease owner name
        self.poster = Poster(settings)
        self.channels: dict[str, Channel] = {
            "webhook": AgentWebhooks(pool, Sealer.from_settings(settings)),
            "push": TaskPushes(pool, Sealer.from_settings(settings)),
        }
        self.retry = Schedule(base=settings.webhook_retry_base_seconds,
                              cap=max(settings.webhook_retry_cap_seconds,
                                      settings.webhook_retry_base_seconds))
        self.cooldown = Schedule(base=settings.webhook_cooldown_seconds,
                                 cap=max(settings.webhook_cooldown_max_seconds,
                                         settings.webhook_cooldown_seconds), jitter=0.1)
        self._lease = settings.webhook_lease_seconds
        self._slots = asyncio.Semaphore(settings.webhook_concurrency)
        # Whose inbox events wake which lanes, as of the last sweep (and notices since).
        self._known: dict[str, set[LaneKey]] = {}
        self._due: set[LaneKey] = set()
        self._lanes: dict[LaneKey, asyncio.Task[None]] = {}
        self._kicks: dict[LaneKey, asyncio.Event] = {}  # cut a lane's retry wait short
        self._news: dict[LaneKey, asyncio.Event] = {}  # end a running lane's linger
        self._timers: dict[LaneKey, asyncio.TimerHandle] = {}
        self._wake = asyncio.Event()
        self._sweep_now = True
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._follower: asyncio.Task[None] | None = None
        self._lookups: set[asyncio.Task[None]] = set()
        self.delivered = 0
        self.failed = 0

    # --- what starts a lane -------------------------------------------------------

    def poke(self, lane: LaneKey) -> None:
        news = self._news.get(lane)
        if news is not None:
            news.set()  # a lingering lane reads again at once
        self._due.add(lane)  # and if it just ended, it starts again
        self._wake.set()

    def _register(self, agent_id: str, lane: LaneKey) -> None:
        """A new or replaced registration: deliver now, a pending retry included."""
        self._known.setdefault(agent_id, set()).add(lane)
        kick = self._kicks.get(lane)
        if kick is not None:
            kick.set()  # retry now, not after the backoff
        self.poke(lane)

    def _notice(self, data: bytes) -> None:
        notice = delivery.parse_notice(data)
        if notice.webhook:
            self._register(notice.agent_id, ("webhook", notice.agent_id))
        elif notice.push:
            task = asyncio.create_task(self._pushes_of(notice.agent_id))
            self._lookups.add(task)
            task.add_done_callback(self._lookups.discard)
        elif notice.kind in ("event", "commit"):
            for lane in self._known.get(notice.agent_id, ()):
                self.poke(lane)

    async def _pushes_of(self, agent_id: str) -> None:
        """A push-config notice names the agent only: look its configs up."""
        try:
            for push_id in await push_store.of_agent(self.pool, agent_id):
                self._register(agent_id, ("push", str(push_id)))
        except _DB_ERRORS as exc:  # the sweep finds them
            log.warning("push configs of %s: look-up failed (%s)", agent_id, exc)

    def _resubscribed(self) -> None:
        self._sweep_now = True  # notices published meanwhile are lost: look at Postgres
        self._wake.set()

    def _later(self, lane: LaneKey, seconds: float) -> None:
        """Start the lane again in ``seconds`` (a cool-down, a long retry)."""
        old = self._timers.pop(lane, None)
        if old is not None:
            old.cancel()
        loop = asyncio.get_running_loop()
        self._timers[lane] = loop.call_later(seconds, self._timer_fired, lane)

    def _timer_fired(self, lane: LaneKey) -> None:
        self._timers.pop(lane, None)
        self.poke(lane)

    async def sweep(self) -> None:
        known: dict[str, set[LaneKey]] = {}
        for kind, channel in self.channels.items():
            for agent_id, key, due in await channel.sweep(SWEEP_LIMIT):
                lane = (kind, key)
                known.setdefault(agent_id, set()).add(lane)
                if due:
                    self.poke(lane)
        self._known = known
        WEBHOOK_BREAKERS_OPEN.set(await webhooks_store.open_breakers(self.pool))

    # --- the main loop ------------------------------------------------------------

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        backoff = Backoff("webhook_sweep", stop=self._stopping, logger=log)
        next_sweep = 0.0
        while not self._stopping.is_set():
            if self._sweep_now or loop.time() >= next_sweep:
                self._sweep_now = False
                try:
                    await self.sweep()
                    backoff.reset()
                except _DB_ERRORS as exc:
                    await backoff.wait(f"could not sweep the webhooks ({exc})")
                    continue
                next_sweep = loop.time() + self.settings.webhook_sweep_seconds
            for lane in list(self._due):
                if lane not in self._lanes:
                    self._due.discard(lane)
                    self._start_lane(lane)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(next_sweep - loop.time(), 0.0)):
                    await self._wake.wait()

    def _start_lane(self, lane: LaneKey) -> None:
        task = asyncio.create_task(self._lane(lane), name=f"{lane[0]}:{lane[1]}")
        self._lanes[lane] = task
        self._kicks[lane] = asyncio.Event()
        self._news[lane] = asyncio.Event()

        def done(_: asyncio.Task[None]) -> None:
            self._lanes.pop(lane, None)
            self._kicks.pop(lane, None)
            self._news.pop(lane, None)
            self._wake.set()  # a poke that came while it ran starts it again

        task.add_done_callback(done)

    # --- one target ---------------------------------------------------------------

    async def _lane(self, lane: LaneKey) -> None:
        channel, key = self.channels[lane[0]], lane[1]
        try:
            row = await channel.claim(key, self.name, self._lease)
            if row is None:
                return  # another process delivers it, or the registration is gone
            try:
                async with self.poster.client() as client:
                    await self._deliver(client, lane, row)
            finally:
                if await channel.release(key, self.name):
                    self.poke(lane)  # committed while we finished: go on
        except Exception as exc:  # a lane must never end silently: try again later
            # The lease (if held) lapses by itself; nothing was acked that was not sent.
            log.warning("%s %s: delivery round failed (%s: %s); retrying shortly",
                        lane[0], key, type(exc).__name__, exc)
            self._later(lane, self.retry.delay(1))

    async def _deliver(self, client: aiohttp.ClientSession, lane: LaneKey,
                       row: asyncpg.Record | None) -> None:
        channel, key = self.channels[lane[0]], lane[1]
        loop = asyncio.get_running_loop()
        renewed = loop.time()  # every row-returning write renews the lease
        while row is not None and not self._stopping.is_set():
            wait = float(row["wait_seconds"])
            if wait > 0:
                if row["breaker"] == "open" or wait > self._lease / 3:
                    self._later(lane, wait)  # a cool-down: give the lease up
                    return
                await self._pause(lane, wait)
                row, renewed = await channel.renew(key, self.name, self._lease), loop.time()
                continue
            news = self._news.get(lane)
            if news is not None:
                news.clear()  # before the read: a notice after it is not missed
            items = await channel.batch(key, row, BATCH)
            if not items:
                if news is None or not await self._linger(news):
                    return
                if loop.time() - renewed < self._lease / 3:
                    # The lease has two thirds left: re-read the lane (cursor,
                    # breaker, a replaced URL or secret) without a commit on the
                    # way to the next POST; the next ack renews it.
                    row = await channel.peek(key, self.name)
                else:
                    row, renewed = await channel.renew(key, self.name, self._lease), loop.time()
                continue
            row, renewed = await self._post_all(client, lane, row, items), loop.time()

    async def _linger(self, news: asyncio.Event) -> bool:
        """Caught up: keep the lease and the connection a moment for the next
        event (True: one came) rather than pay a claim, a connect and a release
        for each event of a steady trickle."""
        seconds = min(self.settings.webhook_linger_seconds, self._lease / 3)
        if seconds <= 0 or self._stopping.is_set():
            return False
        stop = asyncio.ensure_future(self._stopping.wait())
        came = asyncio.ensure_future(news.wait())
        try:
            await asyncio.wait({stop, came}, timeout=seconds,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            came.cancel()
        return news.is_set() and not self._stopping.is_set()

    async def _pause(self, lane: LaneKey, seconds: float) -> None:
        """A retry's backoff; ended early by a stop or a new registration."""
        kick = self._kicks.get(lane) or asyncio.Event()
        kick.clear()
        stop = asyncio.ensure_future(self._stopping.wait())
        kicked = asyncio.ensure_future(kick.wait())
        try:
            await asyncio.wait({stop, kicked}, timeout=seconds,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            kicked.cancel()

    async def _post_all(self, client: aiohttp.ClientSession, lane: LaneKey, row: asyncpg.Record,
                        items: list[Item]) -> asyncpg.Record | None:
        """POST ``items`` in order until one fails; the 2xxs are recorded together,
        every ``ACK_EVERY`` POSTs or ``ACK_WITHIN_SECONDS``, whichever comes first,
        and before a failure is. The fresh row after the last write."""
        channel = self.channels[lane[0]]
        loop = asyncio.get_running_loop()
        taken: list[Item] = []
        since = 0.0
        for item in items:
            if item.seq <= int(row["cursor"]) or self._stopping.is_set():
                break  # acked meanwhile by another reader, or stopping
            if not item.skip:  # a skipped item is nothing the target shows: no call
                async with self._slots:
                    outcome = await self.poster.post(client, row["url"],
                                                     channel.headers(row, item), item.body)
                if not outcome.ok:
                    if taken:
                        row = await self._acked(lane, row, taken)
                    # A failure waits for the retry, then starts again at the cursor.
                    return await self._failed(lane, row, outcome) if row is not None else None
                self.delivered += 1
            if not taken:
                since = loop.time()
            taken.append(item)
            if len(taken) >= ACK_EVERY or loop.time() - since >= ACK_WITHIN_SECONDS:
                fresh = await self._acked(lane, row, taken)
                if fresh is None:
                    return None  # the lease is gone: another process delivers now
                row, taken = fresh, []
        return await self._acked(lane, row, taken) if taken else row

    async def _acked(self, lane: LaneKey, row: asyncpg.Record,
                     taken: list[Item]) -> asyncpg.Record | None:
        channel, key = self.channels[lane[0]], lane[1]
        fresh = await channel.delivered(key, row, taken, self.name, self._lease)
        if row["breaker"] == "open":
            log.info("%s %s: answered again; breaker closed", lane[0], key)
        return fresh

    async def _failed(self, lane: LaneKey, row: asyncpg.Record,
                      outcome: Outcome) -> asyncpg.Record | None:
        channel, key = self.channels[lane[0]], lane[1]
        self.failed += 1
        failures = int(row["failures"]) + 1
        opens = int(row["opens"])
        if failures >= self.settings.webhook_breaker_failures:
            opens += 1
            breaker, retry_in = "open", self.cooldown.delay(opens)
        else:
            breaker, retry_in = str(row["breaker"]), self.retry.delay(failures)
        fresh = await channel.failed(
            key, self.name, self._lease, error=outcome.error or outcome.reason,
            failures=failures, breaker=breaker, opens=opens, retry_in=retry_in)
        if breaker == "open" and row["breaker"] != "open":
            log.warning("%s %s: %d failures in a row (last: %s); breaker open, next "
                        "probe in %.1f s", lane[0], key, failures, outcome.error, retry_in)
            await channel.opened(key)
            with contextlib.suppress(*_DB_ERRORS):
                WEBHOOK_BREAKERS_OPEN.set(await webhooks_store.open_breakers(self.pool))
        return fresh

    # --- the worker ---------------------------------------------------------------

    @property
    def task(self) -> asyncio.Task[None] | None:
        return self._task

    async def start(self) -> None:
        self._follower = asyncio.create_task(follow(
            self.settings.redis_url, delivery.NOTIFY_CHANNEL,
            Backoff("webhook_notices", stop=self._stopping, logger=log),
            on_message=self._notice, on_subscribed=self._resubscribed), name="webhook-notices")
        self._task = asyncio.create_task(self.run(), name="webhook-loop")
        log.info("webhook worker started as %s", self.name)

    async def stop(self) -> None:
        """Finish the POSTs in flight (each bounded by the timeout), give the leases
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
        log.info("webhook worker stopped: %d delivered, %d failed attempts", self.delivered,
                 self.failed)


# --- the process --------------------------------------------------------------------

async def build(rt: runtime.Runtime) -> WebhookWorker:
    return WebhookWorker(rt.settings, await rt.pool())


def main() -> None:
    runtime.main(build, "webhook")


if __name__ == "__main__":
    main()
