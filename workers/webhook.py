"""Webhook delivery: each webhook agent's inbox POSTed in seq order (ADR 035).

Postgres is the source: an agent's events are read after its acked cursor and
POSTed one at a time, each signed per Standard Webhooks (app.webhook_signing);
a 2xx within ``MESH_WEBHOOK_TIMEOUT_SECONDS`` acks it through the same ack
service as ``POST /v1/mesh/inbox/ack``, anything else is retried with backoff
and jitter (app.retry) while that agent's later events wait. After
``MESH_WEBHOOK_BREAKER_FAILURES`` failures in a row the agent's breaker opens:
no calls until a half-open probe after a cool-down that doubles with each
failed probe. Nothing is dropped: unacked events stay in the inbox for SSE,
long-poll, or the webhook once it answers again.

Each agent has its own task (a lane), so a slow or dead endpoint delays only its
own agent; at most ``MESH_WEBHOOK_CONCURRENCY`` POSTs are in flight at once. A
lane holds a lease on the agent's ``agent_webhooks`` row, so several webhook
processes never deliver one agent at the same time. Lanes start on the commit
and event notices every web process and push worker publish already
(app.delivery), on a registration's notice, and on a periodic sweep, the
safety net for notices lost while Redis was away or sent to another process.

Run: ``python -m workers.webhook`` (the Procfile ``webhook`` process).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from datetime import UTC, datetime
from typing import Any

import asyncpg
import httpx

from app import delivery
from app.event_wire import WireEvent
from app.metrics import WEBHOOK_BREAKERS_OPEN
from app.redis_follow import follow
from app.retry import Backoff, Schedule
from app.services import inbox
from app.services.principals import Agent
from app.settings import Settings
from app.store import agents as agents_store
from app.store import inbox as inbox_store
from app.store import webhooks as webhooks_store
from app.webhook_signing import Sealer, signature_headers
from workers import runtime
from workers.webhook_post import Outcome, Poster

log = logging.getLogger("mesh.webhook")

# Events read from Postgres per round of one lane.
BATCH = 100
# Webhooks looked at per sweep.
SWEEP_LIMIT = 50_000
_DB_ERRORS = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)


class WebhookWorker:
    def __init__(self, settings: Settings, pool: asyncpg.Pool) -> None:
        self.settings = settings
        self.pool = pool
        self.name = runtime.consumer_name()  # this process's lease owner name
        self.poster = Poster(settings)
        self.sealer = Sealer.from_settings(settings)
        self.retry = Schedule(base=settings.webhook_retry_base_seconds,
                              cap=max(settings.webhook_retry_cap_seconds,
                                      settings.webhook_retry_base_seconds))
        self.cooldown = Schedule(base=settings.webhook_cooldown_seconds,
                                 cap=max(settings.webhook_cooldown_max_seconds,
                                         settings.webhook_cooldown_seconds), jitter=0.1)
        self._lease = settings.webhook_lease_seconds
        self._slots = asyncio.Semaphore(settings.webhook_concurrency)
        self._known: set[str] = set()  # agents with a webhook, as of the last sweep
        self._due: set[str] = set()
        self._lanes: dict[str, asyncio.Task[None]] = {}
        self._kicks: dict[str, asyncio.Event] = {}  # cut a lane's retry wait short
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._wake = asyncio.Event()
        self._sweep_now = True
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._follower: asyncio.Task[None] | None = None
        self.delivered = 0
        self.failed = 0

    # --- what starts a lane -------------------------------------------------------

    def poke(self, agent_id: str) -> None:
        self._due.add(agent_id)
        self._wake.set()

    def _notice(self, data: bytes) -> None:
        notice = delivery.parse_notice(data)
        if notice.webhook:
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

    def _later(self, agent_id: str, seconds: float) -> None:
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
        rows = await webhooks_store.sweep(self.pool, SWEEP_LIMIT)
        self._known = {r["agent_id"] for r in rows}
        for row in rows:
            if row["due"]:
                self.poke(row["agent_id"])
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
            for agent_id in list(self._due):
                if agent_id not in self._lanes:
                    self._due.discard(agent_id)
                    self._start_lane(agent_id)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(next_sweep - loop.time(), 0.0)):
                    await self._wake.wait()

    def _start_lane(self, agent_id: str) -> None:
        task = asyncio.create_task(self._lane(agent_id), name=f"webhook:{agent_id}")
        self._lanes[agent_id] = task
        self._kicks[agent_id] = asyncio.Event()

        def done(_: asyncio.Task[None]) -> None:
            self._lanes.pop(agent_id, None)
            self._kicks.pop(agent_id, None)
            self._wake.set()  # a poke that came while it ran starts it again

        task.add_done_callback(done)

    # --- one agent ----------------------------------------------------------------

    async def _lane(self, agent_id: str) -> None:
        try:
            row = await webhooks_store.claim(self.pool, agent_id, self.name, self._lease)
            if row is None:
                return  # another process delivers it, or the webhook is gone
            try:
                async with self.poster.client() as client:
                    await self._deliver(client, agent_id, row)
            finally:
                if await webhooks_store.release(self.pool, agent_id, self.name):
                    self.poke(agent_id)  # committed while we finished: go on
        except Exception as exc:  # a lane must never end silently: try again later
            # The lease (if held) lapses by itself; nothing was acked that was not sent.
            log.warning("webhook %s: delivery round failed (%s: %s); retrying shortly",
                        agent_id, type(exc).__name__, exc)
            self._later(agent_id, self.retry.delay(1))

    async def _deliver(self, client: httpx.AsyncClient, agent_id: str,
                       row: asyncpg.Record | None) -> None:
        while row is not None and not self._stopping.is_set():
            wait = float(row["wait_seconds"])
            if wait > 0:
                if row["breaker"] == "open" or wait > self._lease / 3:
                    self._later(agent_id, wait)  # a cool-down: give the lease up
                    return
                await self._pause(agent_id, wait)
                row = await webhooks_store.renew(self.pool, agent_id, self.name, self._lease)
                continue
            events = await inbox_store.after(self.pool, agent_id, int(row["cursor"]), BATCH)
            if not events:
                return
            for event in events:
                if row is None or event.seq <= int(row["cursor"]) or self._stopping.is_set():
                    break  # acked meanwhile by another reader, or stopping
                row = await self._one(client, agent_id, row, event)
                if row is not None and row["failures"]:
                    break  # wait for the retry, then start again at the cursor

    async def _pause(self, agent_id: str, seconds: float) -> None:
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

    async def _one(self, client: httpx.AsyncClient, agent_id: str, row: asyncpg.Record,
                   event: WireEvent) -> asyncpg.Record | None:
        """POST one event; the fresh row after recording what came of it."""
        async with self._slots:
            outcome = await self.poster.post(client, row["url"], self._sign(row, event),
                                             event.data)
        if not outcome.ok:
            return await self._failed(agent_id, row, outcome)
        await inbox.record_delivery(self.pool, agent_id, [event])
        await inbox.ack(self.pool, Agent(agent_id, int(row["owner_id"]), str(row["kind"])),
                        event.seq)
        self.delivered += 1
        was_down = row["breaker"] == "open" or row["status"] == "inactive"
        fresh = await webhooks_store.succeeded(self.pool, agent_id, self.name, self._lease)
        if was_down:
            await agents_store.set_reachable(self.pool, agent_id, True)
            if row["breaker"] == "open":
                log.info("webhook %s: answered again; breaker closed", agent_id)
        return fresh

    def _sign(self, row: asyncpg.Record, event: WireEvent) -> dict[str, str]:
        keys = [self.sealer.open(row["secret"])]
        if row["previous_valid"]:
            keys.append(self.sealer.open(row["previous_secret"]))
        event_id = _event_id(event)
        return signature_headers(event_id, datetime.now(UTC), event.data, keys)

    async def _failed(self, agent_id: str, row: asyncpg.Record,
                      outcome: Outcome) -> asyncpg.Record | None:
        self.failed += 1
        failures = int(row["failures"]) + 1
        opens = int(row["opens"])
        if failures >= self.settings.webhook_breaker_failures:
            opens += 1
            breaker, retry_in = "open", self.cooldown.delay(opens)
        else:
            breaker, retry_in = str(row["breaker"]), self.retry.delay(failures)
        fresh = await webhooks_store.failed(
            self.pool, agent_id, self.name, self._lease, error=outcome.error or outcome.reason,
            failures=failures, breaker=breaker, opens=opens, retry_in=retry_in)
        if breaker == "open" and row["breaker"] != "open":
            log.warning("webhook %s: %d failures in a row (last: %s); breaker open, next "
                        "probe in %.1f s", agent_id, failures, outcome.error, retry_in)
            await agents_store.set_reachable(self.pool, agent_id, False)
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


def _event_id(event: WireEvent) -> str:
    data: dict[str, Any] = json.loads(event.data)
    return str(data["event_id"])


# --- the process --------------------------------------------------------------------

async def build(rt: runtime.Runtime) -> WebhookWorker:
    return WebhookWorker(rt.settings, await rt.pool())


def main() -> None:
    runtime.main(build, "webhook")


if __name__ == "__main__":
    main()
