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

Each agent's webhook is a lane of its own (workers/lanes.py, shared with the A2A
bridge), so a slow or dead endpoint delays only its own agent; at most
``MESH_WEBHOOK_CONCURRENCY`` POSTs are in flight at once. A lane holds a lease on
the agent's ``agent_webhooks`` row, so several webhook processes never deliver one
agent at the same time; it starts on the notices every web process and push worker
publish already, and on a periodic sweep.

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
from collections.abc import Iterable

import aiohttp
import asyncpg

from app.delivery.protocol import Notice
from app.delivery.webhook_signing import Sealer
from app.platform.metrics import WEBHOOK_BREAKERS_OPEN
from app.platform.retry import Schedule
from app.platform.settings import Settings
from app.store import push_configs as push_store
from app.store import webhooks as webhooks_store
from workers import runtime
from workers.lanes import DB_ERRORS, SWEEP_LIMIT, LaneWorker
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


class WebhookWorker(LaneWorker[LaneKey]):
    """The delivery loop, for every channel: its lanes, the retries, the breaker."""

    label = "webhook"
    log = log

    def __init__(self, settings: Settings, pool: asyncpg.Pool) -> None:
        super().__init__(settings, pool, lease_seconds=settings.webhook_lease_seconds,
                         sweep_seconds=settings.webhook_sweep_seconds,
                         retry=Schedule(base=settings.webhook_retry_base_seconds,
                                        cap=max(settings.webhook_retry_cap_seconds,
                                                settings.webhook_retry_base_seconds)))
        self.poster = Poster(settings)
        self.channels: dict[str, Channel] = {
            "webhook": AgentWebhooks(pool, Sealer.from_settings(settings)),
            "push": TaskPushes(pool, Sealer.from_settings(settings)),
        }
        self.cooldown = Schedule(base=settings.webhook_cooldown_seconds,
                                 cap=max(settings.webhook_cooldown_max_seconds,
                                         settings.webhook_cooldown_seconds), jitter=0.1)
        self._slots = asyncio.Semaphore(settings.webhook_concurrency)
        self._lookups: set[asyncio.Task[None]] = set()
        self.delivered = 0
        self.failed = 0

    # --- the lanes: an agent's webhook, each push config ----------------------------

    async def sweep_lanes(self) -> Iterable[tuple[str, LaneKey, bool]]:
        lanes = []
        for kind, channel in self.channels.items():
            lanes += [(agent_id, (kind, key), due)
                      for agent_id, key, due in await channel.sweep(SWEEP_LIMIT)]
        return lanes

    async def after_sweep(self) -> None:
        WEBHOOK_BREAKERS_OPEN.set(await webhooks_store.open_breakers(self.pool))

    def registration(self, notice: Notice) -> None:
        if notice.webhook:
            self.register(notice.agent_id, ("webhook", notice.agent_id))
        elif notice.push:
            task = asyncio.create_task(self._pushes_of(notice.agent_id))
            self._lookups.add(task)
            task.add_done_callback(self._lookups.discard)

    async def _pushes_of(self, agent_id: str) -> None:
        """A push-config notice names the agent only: look its configs up."""
        try:
            for push_id in await push_store.of_agent(self.pool, agent_id):
                self.register(agent_id, ("push", str(push_id)))
        except DB_ERRORS as exc:  # the sweep finds them
            log.warning("push configs of %s: look-up failed (%s)", agent_id, exc)

    async def claim(self, lane: LaneKey) -> asyncpg.Record | None:
        return await self.channels[lane[0]].claim(lane[1], self.name, self.lease_seconds)

    async def release(self, lane: LaneKey) -> bool:
        return await self.channels[lane[0]].release(lane[1], self.name)

    def lane_name(self, lane: LaneKey) -> str:
        return f"{lane[0]}:{lane[1]}"

    # --- one target ---------------------------------------------------------------

    async def serve(self, lane: LaneKey, row: asyncpg.Record) -> None:
        async with self.poster.client() as client:
            await self._deliver(client, lane, row)

    async def _deliver(self, client: aiohttp.ClientSession, lane: LaneKey,
                       row: asyncpg.Record | None) -> None:
        channel, key = self.channels[lane[0]], lane[1]
        loop = asyncio.get_running_loop()
        renewed = loop.time()  # every row-returning write renews the lease
        while row is not None and not self.stopping:
            wait = float(row["wait_seconds"])
            if wait > 0:
                if row["breaker"] == "open" or wait > self.lease_seconds / 3:
                    self.later(lane, wait)  # a cool-down: give the lease up
                    return
                await self.pause(lane, wait)
                row, renewed = await channel.renew(key, self.name, self.lease_seconds), loop.time()
                continue
            self.news(lane).clear()  # before the read: a notice after it is not missed
            items = await channel.batch(key, row, BATCH)
            if not items:
                # Caught up: keep the lease and the connection a moment for the next
                # event rather than pay a claim, a connect and a release for each
                # event of a steady trickle.
                linger = min(self.settings.webhook_linger_seconds, self.lease_seconds / 3)
                if not await self.linger(lane, linger):
                    return
                if loop.time() - renewed < self.lease_seconds / 3:
                    # The lease has two thirds left: re-read the lane (cursor,
                    # breaker, a replaced URL or secret) without a commit on the
                    # way to the next POST; the next ack renews it.
                    row = await channel.peek(key, self.name)
                else:
                    row, renewed = await channel.renew(key, self.name, self.lease_seconds), \
                        loop.time()
                continue
            row, renewed = await self._post_all(client, lane, row, items), loop.time()

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
            if item.seq <= int(row["cursor"]) or self.stopping:
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
        fresh = await channel.delivered(key, row, taken, self.name, self.lease_seconds)
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
            key, self.name, self.lease_seconds, error=outcome.error or outcome.reason,
            failures=failures, breaker=breaker, opens=opens, retry_in=retry_in)
        if breaker == "open" and row["breaker"] != "open":
            log.warning("%s %s: %d failures in a row (last: %s); breaker open, next "
                        "probe in %.1f s", lane[0], key, failures, outcome.error, retry_in)
            await channel.opened(key)
            with contextlib.suppress(*DB_ERRORS):
                WEBHOOK_BREAKERS_OPEN.set(await webhooks_store.open_breakers(self.pool))
        return fresh

    # --- the worker ---------------------------------------------------------------

    async def start(self) -> None:
        await super().start()
        log.info("webhook worker started as %s", self.name)

    async def stopped(self) -> None:
        log.info("webhook worker stopped: %d delivered, %d failed attempts", self.delivered,
                 self.failed)


# --- the process --------------------------------------------------------------------

async def build(rt: runtime.Runtime) -> WebhookWorker:
    return WebhookWorker(rt.settings, await rt.pool())


def main() -> None:
    runtime.main(build, "webhook")


if __name__ == "__main__":
    main()
