"""The outbound A2A bridge: agents served by an A2A server elsewhere (ADR 041).

An agent of kind ``a2a`` has an ``a2a_remotes`` row: its card and the headers
to call it with. This process reads each such agent's inbox after its acked
cursor, in seq order, one lane per agent with the agent's lease held
(workers/lanes.py, shared with the webhook process), and hands each event to
workers.a2a_forward, which sends it to the remote (workers.a2a_remote) and
follows the answer while the lane goes on with the next event.

A remote that cannot be reached is retried with backoff (the event stays
unacked, later events of the agent wait behind it) and the agent shows
``inactive`` until it answers again. A remote that answers with an A2A error
fails the mesh task with the error as its reason, and the lane goes on.

Run: ``python -m workers.a2a_bridge`` (the Procfile ``a2a-bridge`` process).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import asyncpg
import redis.asyncio as aioredis

from app.delivery.after_commit import AfterCommit
from app.delivery.protocol import Notice
from app.domain.event_wire import WireEvent
from app.platform.metrics import A2A_FORWARDED, A2A_UNREACHABLE
from app.platform.retry import Schedule
from app.platform.settings import Settings
from app.services.mesh import Mesh
from app.store import a2a_remotes as store
from app.store import agents as agents_store
from app.store import inbox as inbox_store
from workers import runtime
from workers.a2a_forward import Forwarder
from workers.a2a_remote import Remote, RemoteDown, refresh_card, remote_of
from workers.lanes import SWEEP_LIMIT, LaneWorker

log = logging.getLogger("mesh.a2a_bridge")

BATCH = 100
READY = "a2a bridge started"


class BridgeWorker(LaneWorker[str]):
    """One lane per remote agent, named by its agent id."""

    label = "a2a-bridge"
    log = log

    def __init__(self, settings: Settings, pool: asyncpg.Pool, redis: aioredis.Redis,
                 wakeup: AfterCommit | None = None) -> None:
        super().__init__(settings, pool,
                         lease_seconds=settings.a2a_bridge_lease_seconds,
                         sweep_seconds=settings.a2a_bridge_sweep_seconds,
                         retry=Schedule(base=settings.a2a_bridge_retry_base_seconds,
                                        cap=max(settings.a2a_bridge_retry_cap_seconds,
                                                settings.a2a_bridge_retry_base_seconds)))
        self.leases = store.LEASES
        self.wakeup = wakeup
        self.forwarder = Forwarder(settings, pool, Mesh(pool, settings, redis, wakeup=wakeup),
                                   self._stopping)
        self.forwarded = 0

    # --- the lanes ------------------------------------------------------------------

    async def sweep_lanes(self) -> Iterable[tuple[str, str, bool]]:
        rows = await self.leases.sweep(self.pool, SWEEP_LIMIT)
        return [(r["agent_id"], r["agent_id"], bool(r["due"])) for r in rows]

    def registration(self, notice: Notice) -> None:
        if notice.webhook:  # an A2A remote registered or changed
            self.register(notice.agent_id, notice.agent_id)

    async def claim(self, lane: str) -> asyncpg.Record | None:
        return await self.leases.claim(self.pool, lane, self.name, self.lease_seconds)

    async def release(self, lane: str) -> bool:
        return await self.leases.release(self.pool, lane, self.name)

    async def renew(self, agent_id: str) -> asyncpg.Record | None:
        return await self.leases.renew(self.pool, agent_id, self.name, self.lease_seconds)

    # --- one agent's lane -----------------------------------------------------------

    async def serve(self, agent_id: str, row: asyncpg.Record) -> None:
        """Forward the agent's events; while tasks it forwarded are followed here,
        hold the lease (renewed) and take new events as they come, so the lease
        holder is the one process following them."""
        await self.forwarder.resume(remote_of(self.settings, agent_id, row))
        current: asyncpg.Record | None = row
        while current is not None and not self.stopping:
            wait = float(current["wait_seconds"])
            if wait > 0:
                if wait > self.lease_seconds / 3 and not self.forwarder.followers(agent_id):
                    self.later(agent_id, wait)  # a long retry: give the lease up
                    return
                await self.pause(agent_id, min(wait, self.lease_seconds / 3))
                current = await self.renew(agent_id)
                continue
            await refresh_card(self.settings, self.pool, agent_id, current)
            self.news(agent_id).clear()  # before the read: a notice after it is not missed
            events = await inbox_store.after(self.pool, agent_id, int(current["cursor"]), BATCH)
            if not events:
                followers = self.forwarder.followers(agent_id)
                if not followers:
                    return
                await self.linger(agent_id, self.lease_seconds / 3, followers)
                current = await self.renew(agent_id)
                continue
            remote = remote_of(self.settings, agent_id, current)
            for event in events:
                if current is None or event.seq <= int(current["cursor"]) or self.stopping:
                    break
                current = await self._one(remote, current, event)
                if current is not None and current["failures"]:
                    break  # wait for the retry, then start again at the cursor

    async def _one(self, remote: Remote, row: asyncpg.Record,
                   event: WireEvent) -> asyncpg.Record | None:
        agent_id = remote.agent.agent_id
        try:
            await self.forwarder.forward(remote, event)
        except RemoteDown as exc:
            A2A_UNREACHABLE.inc()
            failures = int(row["failures"]) + 1
            retry_in = self.retry.delay(failures)
            if failures == 1:
                log.warning("a2a %s: the remote cannot be reached (%s); retrying", agent_id, exc)
                await agents_store.set_reachable(self.pool, agent_id, False)
            return await store.failed(self.pool, agent_id, self.name, self.lease_seconds,
                                      error=str(exc), failures=failures, retry_in=retry_in)
        self.forwarded += 1
        A2A_FORWARDED.inc()
        if row["failures"] or row["status"] == "inactive":
            await agents_store.set_reachable(self.pool, agent_id, True)
        return await store.succeeded(self.pool, agent_id, self.name, self.lease_seconds)

    # --- the worker ---------------------------------------------------------------

    async def start(self) -> None:
        if self.wakeup is not None:
            await self.wakeup.start()
        await super().start()
        log.info("%s as %s", READY, self.name)

    async def stopped(self) -> None:
        await self.forwarder.stop()
        if self.wakeup is not None:
            await self.wakeup.stop()
        log.info("a2a bridge stopped: %d events forwarded", self.forwarded)


# --- the process --------------------------------------------------------------------

async def build(rt: runtime.Runtime) -> BridgeWorker:
    pool, redis = await rt.pool(), await rt.redis()
    return BridgeWorker(rt.settings, pool, redis, AfterCommit(pool, redis))


def main() -> None:
    runtime.main(build, "a2a-bridge")


if __name__ == "__main__":
    main()
