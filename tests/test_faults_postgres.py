"""Postgres faults, counted like tests/test_faults.py: Postgres
is stopped for ≥ 10 s while sends, SSE streams, long-polls and cron run. While it
is down every request answers 503 with Retry-After — never a 500, never a hang;
afterwards every process has reconnected by itself (the same cron process runs
its jobs again, the relay drains the outbox), and every accepted message arrived
exactly once, in order."""

from __future__ import annotations

import pytest

from app.platform.settings import Settings
from devstack.stack import Stack
from tests.support.faults import Procs, Topology, stop_postgres
from tests.support.isolated import wait_until
from tests.test_faults import HEAL_TIMEOUT, scenario
from tests.test_faults import bus_settings as bus_settings

pytestmark = pytest.mark.faults

# Cron's heartbeat expiry runs every 15 s; with this TTL an agent that beats once
# is expired by the first run after it (5 s: the check right after the beat still
# sees it active on a loaded machine).
HEARTBEAT_TTL = 5


async def stop_postgres_for_10s_cron_resumes(procs: Procs) -> None:
    cron = procs.crons[0]
    assert cron.proc is not None
    pid = cron.proc.pid
    await stop_postgres(procs, seconds=10.0)
    # After the outage an agent beats once; only a heartbeat-expiry run of the cron
    # process that lived through the outage (same pid) can make it inactive again.
    agent = procs.collectors[0].agent
    offset = len(cron.log.read_bytes())

    async def beat() -> bool:
        return (await agent.post("/v1/mesh/heartbeat")).status_code == 200

    async def status() -> str:
        return (await agent.get("/v1/mesh/me")).json()["status"]  # type: ignore[no-any-return]

    await wait_until(beat, "a heartbeat accepted after the outage", timeout=HEAL_TIMEOUT)
    assert await status() == "active"
    async def inactive() -> bool:
        return await status() == "inactive"

    await wait_until(inactive, "cron expiring the heartbeat after the outage",
                     timeout=HEAL_TIMEOUT)
    assert cron.proc.poll() is None and cron.proc.pid == pid
    assert "marked inactive" in cron.log.read_bytes()[offset:].decode(errors="replace")


async def test_postgres_outage_503_then_no_loss_no_duplicates_in_order(
        bus_settings: Settings, stack: Stack, db) -> None:
    if stack.postgres is None:
        pytest.skip("Postgres is not the stack's own (MESH_DATABASE_URL given)")
    counts = await scenario(bus_settings, stack, db, stop_postgres_for_10s_cron_resumes,
                            Topology(cron=1), heartbeat_ttl_seconds=HEARTBEAT_TTL)
    assert len(counts) == 3 and all(n > 0 for n in counts.values())
