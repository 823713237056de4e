"""Postgres faults (issue 15 item 8), counted like tests/test_faults.py: Postgres
is stopped for ≥ 10 s while sends, SSE streams and long-polls run. While it is
down every request answers 503 with Retry-After — never a 500, never a hang;
afterwards every process has reconnected by itself, the relay drains the outbox,
and every accepted message arrived exactly once, in order."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from app.settings import Settings
from devstack.stack import Stack
from tests.test_faults import Procs, scenario, wait_accepted
from tests.test_faults import bus_settings as bus_settings

pytestmark = pytest.mark.faults

OUTAGE_SECONDS = 10.0
# A request during the outage must be answered well within this (no hang).
ANSWER_WITHIN = 8.0


async def _probe(procs: Procs, who: dict[str, str], method: str, path: str,
                 **kw: object) -> int:
    async with httpx.AsyncClient(base_url=procs.web.url, timeout=ANSWER_WITHIN) as http:
        resp = await http.request(method, path, headers=who, **kw)  # type: ignore[arg-type]
        if resp.status_code == 503:
            assert int(resp.headers["Retry-After"]) >= 1
            assert resp.headers["content-type"].startswith("application/problem+json")
        return resp.status_code


async def stop_postgres_for_10s(procs: Procs) -> None:
    await wait_accepted(procs, 200)
    postgres = procs.stack.postgres
    assert postgres is not None
    sender, recipient = procs.collectors[0].agent, procs.collectors[1].agent
    await asyncio.to_thread(postgres.stop_fast)
    started = time.monotonic()
    statuses: list[int] = []
    try:
        # The outage must last ≥ 10 s (that is the scenario); meanwhile probe.
        while time.monotonic() - started < OUTAGE_SECONDS:
            statuses += await asyncio.gather(
                _probe(procs, sender.headers, "POST", "/v1/mesh/tasks", json={
                    "to_agent_id": recipient.agent_id,
                    "message": {"parts": [{"kind": "text", "text": "probe"}]}}),
                _probe(procs, recipient.headers, "GET", "/v1/mesh/inbox",
                       params={"wait": 2}),
                _probe(procs, recipient.headers, "GET", "/v1/mesh/inbox/stream"))
    finally:
        await asyncio.to_thread(postgres.start)
    assert time.monotonic() - started >= OUTAGE_SECONDS
    assert statuses and set(statuses) == {503}, statuses


async def test_postgres_outage_503_then_no_loss_no_duplicates_in_order(
        bus_settings: Settings, stack: Stack, db) -> None:
    if stack.postgres is None:
        pytest.skip("Postgres is not the stack's own (MESH_DATABASE_URL given)")
    counts = await scenario(bus_settings, stack, db, stop_postgres_for_10s)
    assert len(counts) == 3 and all(n > 0 for n in counts.values())
