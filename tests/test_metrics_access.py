"""Web's ``/metrics`` behind ``MESH_METRICS_TOKEN``, and no agent ids in the
default metrics: a real gateway on a socket, read the way a scraper (or a
stranger) would."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest
from prometheus_client import REGISTRY

from app.platform.settings import Settings
from cron import jobs
from tests.api_helpers import problem
from tests.support.meshapi import MeshFactory
from tests.support.servers import serve_app

TOKEN = "scrape-9f2c1d7e4b8a6035c1e2d3f4a5b6c7d8"


@pytest.fixture
async def web(iso: Settings) -> AsyncIterator[str]:
    async with serve_app(iso.model_copy(update={"metrics_token": TOKEN})) as url:
        yield url


async def test_metrics_need_the_bearer_token(web: str) -> None:
    refused = 0
    wrong = [{}, {"Authorization": ""}, {"Authorization": "Bearer"},
             {"Authorization": "Bearer wrong"}, {"Authorization": f"Bearer {TOKEN[:-1]}"},
             {"Authorization": f"Bearer {TOKEN}x"}, {"Authorization": f"Basic {TOKEN}"},
             {"Authorization": TOKEN}, {"X-Metrics-Token": TOKEN},
             {"Authorization": f"Bearer {TOKEN.upper()}"}]
    async with httpx.AsyncClient(base_url=web, timeout=30) as http:
        answers = [await http.get("/metrics", headers=headers) for headers in wrong]
        assert [r.status_code for r in answers] == [401] * len(wrong), \
            f"{sum(r.status_code != 401 for r in answers)} of {len(wrong)} read the metrics"
        for resp in answers:
            body = problem(resp, 401, "MESH_METRICS_TOKEN")
            assert resp.headers["content-type"].startswith("application/problem+json")
            assert resp.headers["www-authenticate"] == "Bearer"
            assert "agent_mesh_" not in resp.text and body["status"] == 401
            refused += 1
        served = 0
        for headers in ({"Authorization": f"Bearer {TOKEN}"},
                        {"Authorization": f"bearer {TOKEN}"}):
            resp = await http.get("/metrics", headers=headers)
            assert resp.status_code == 200, resp.text
            assert resp.headers["content-type"].startswith("text/plain")
            assert "agent_mesh_http_requests_total" in resp.text
            served += 1
        # Health stays open: the load balancer's check carries no token.
        assert (await http.get("/healthz")).status_code == 200
    assert (refused, served) == (10, 2)


async def test_metrics_stay_open_without_a_token(iso: Settings) -> None:
    async with serve_app(iso) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        assert (await http.get("/metrics")).status_code == 200


async def test_default_metrics_carry_no_agent_ids(web: str, pool: asyncpg.Pool) -> None:
    async with MeshFactory.connect(web) as mesh:
        a, b = await mesh.pair()
        task = await a.send(b.agent_id, "one")
        await a.reply(task["task_id"], "two")
        lagging = {a.agent_id, b.agent_id}
        # What cron's gauges job does every 15 s, with the default settings.
        result = await jobs.update_gauges(pool)
        me_b = (await b.get("/v1/mesh/me")).json()
        expected = me_b["inbox_seq"] - me_b["acked_seq"]
        assert result["max_lag"] == expected > 0
        async with httpx.AsyncClient(base_url=web, timeout=30,
                                     headers={"Authorization": f"Bearer {TOKEN}"}) as http:
            text = (await http.get("/metrics")).text
    leaked = [line for line in text.splitlines()
              if any(agent_id in line or agent_id.split("@")[1] in line for agent_id in lagging)]
    assert leaked == [], leaked
    assert REGISTRY.get_sample_value("agent_mesh_consumer_lag_max") >= expected
    assert 'agent_id="' not in text

    # Opted in (MESH_METRICS_AGENT_LABELS=true), the per-agent gauge comes back,
    # and leaves again when the setting is off.
    await jobs.update_gauges(pool, per_agent=True)
    assert REGISTRY.get_sample_value("agent_mesh_consumer_lag",
                                     {"agent_id": b.agent_id}) == expected
    await jobs.update_gauges(pool)
    assert REGISTRY.get_sample_value("agent_mesh_consumer_lag",
                                     {"agent_id": b.agent_id}) is None


async def test_a_made_up_method_adds_no_metric_series(gateway: str) -> None:
    async with httpx.AsyncClient(base_url=gateway, timeout=10) as http:
        # Methods the HTTP parser knows but the API does not use (uvicorn
        # itself refuses unknown tokens with a 400).
        for method in ("PROPFIND", "MKCOL", "LOCK", "TRACE", "PURGE"):
            await http.request(method, "/v1/mesh/me")
        text = (await http.get("/metrics")).text
    assert [line for line in text.splitlines()
            if any(m in line for m in ("PROPFIND", "MKCOL", "LOCK", "TRACE", "PURGE"))] == []
    assert 'route="OTHER ' in text
