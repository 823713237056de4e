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

Each agent has its own lane (workers/lanes.py, shared with the A2A bridge), so a
slow or dead endpoint delays only its own agent; at most
``MESH_WEBHOOK_CONCURRENCY`` POSTs are in flight at once. A lane holds a lease on
the agent's ``agent_webhooks`` row, so several webhook processes never deliver
one agent at the same time.

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

from app.event_wire import WireEvent
from app.metrics import WEBHOOK_BREAKERS_OPEN
from app.retry import Schedule
from app.services import inbox
from app.services.principals import Agent
from app.settings import Settings
from app.store import agents as agents_store
from app.store import inbox as inbox_store
from app.store import webhooks as webhooks_store
from app.webhook_signing import Sealer, signature_headers
from workers import runtime
from workers.lanes import DB_ERRORS, LaneWorker
from workers.webhook_post import Outcome, Poster

log = logging.getLogger("mesh.webhook")

# Events read from Postgres per round of one lane.
BATCH = 100


class WebhookWorker(LaneWorker):
    label = "webhook"
    log = log

    def __init__(self, settings: Settings, pool: asyncpg.Pool) -> None:
        super().__init__(settings, pool, webhooks_store.LEASES,
                         lease_seconds=settings.webhook_lease_seconds,
                         sweep_seconds=settings.webhook_sweep_seconds,
                         retry=Schedule(base=settings.webhook_retry_base_seconds,
                                        cap=max(settings.webhook_retry_cap_seconds,
                                                settings.webhook_retry_base_seconds)))
        self.poster = Poster(settings)
        self.sealer = Sealer.from_settings(settings)
        self.cooldown = Schedule(base=settings.webhook_cooldown_seconds,
                                 cap=max(settings.webhook_cooldown_max_seconds,
                                         settings.webhook_cooldown_seconds), jitter=0.1)
        self._slots = asyncio.Semaphore(settings.webhook_concurrency)
        self.delivered = 0
        self.failed = 0

    async def after_sweep(self) -> None:
        WEBHOOK_BREAKERS_OPEN.set(await webhooks_store.open_breakers(self.pool))

    async def start(self) -> None:
        await super().start()
        log.info("webhook worker started as %s", self.name)

    async def stopped(self) -> None:
        log.info("webhook worker stopped: %d delivered, %d failed attempts", self.delivered,
                 self.failed)

    # --- one agent ----------------------------------------------------------------

    async def serve(self, agent_id: str, row: asyncpg.Record) -> None:
        async with self.poster.client() as client:
            await self._deliver(client, agent_id, row)

    async def _deliver(self, client: httpx.AsyncClient, agent_id: str,
                       row: asyncpg.Record | None) -> None:
        while row is not None and not self.stopping:
            wait = float(row["wait_seconds"])
            if wait > 0:
                if row["breaker"] == "open" or wait > self._lease / 3:
                    self.later(agent_id, wait)  # a cool-down: give the lease up
                    return
                await self.pause(agent_id, wait)
                row = await self.renew(agent_id)
                continue
            events = await inbox_store.after(self.pool, agent_id, int(row["cursor"]), BATCH)
            if not events:
                return
            for event in events:
                if row is None or event.seq <= int(row["cursor"]) or self.stopping:
                    break  # acked meanwhile by another reader, or stopping
                row = await self._one(client, agent_id, row, event)
                if row is not None and row["failures"]:
                    break  # wait for the retry, then start again at the cursor

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
            with contextlib.suppress(*DB_ERRORS):
                WEBHOOK_BREAKERS_OPEN.set(await webhooks_store.open_breakers(self.pool))
        return fresh


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
