"""What the agent page shows of an agent's runs: the current run, the last
error, a page of runs (filter by outcome) and cost per day as a chart."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg
from markupsafe import Markup

from app.console.charts import Bar, bars
from app.responses.runs import RunOut, RunPage, Usage
from app.schemas import RunOutcome
from app.services import runs as runs_service
from app.services.principals import Owner
from app.store import runs as runs_store

CHART_DAYS = 30
PAGE = 20
OUTCOMES: tuple[str, ...] = RunOutcome.__args__  # type: ignore[attr-defined]


@dataclass(frozen=True)
class RunsPanel:
    current: RunOut | None
    last_error: RunOut | None
    page: RunPage
    outcome: str
    usage: Usage
    cost_chart: Markup
    runs_chart: Markup


async def runs_panel(pool: asyncpg.Pool, owner: Owner, agent_id: str,
                     query: Any) -> RunsPanel:
    outcome = query.get("outcome") or ""
    if outcome not in OUTCOMES:
        outcome = ""
    page = await runs_service.page(pool, owner, agent_id, limit=PAGE,
                                   outcome=outcome or None, cursor=query.get("runs_cursor") or None)
    usage = await runs_service.usage(pool, owner, agent_id, CHART_DAYS)
    current = await runs_store.current(pool, agent_id)
    failed = await runs_store.last_error(pool, agent_id)
    days = usage.days
    cost = bars([Bar(d.day.strftime("%b %d"), d.cost_usd,
                     f"{d.day.isoformat()}: ${d.cost_usd:.4f}, {d.runs} runs, {d.turns} turns")
                 for d in days], caption=f"Cost per day, last {CHART_DAYS} days", unit="usd")
    count = bars([Bar(d.day.strftime("%b %d"), float(d.runs),
                      f"{d.day.isoformat()}: {d.runs} runs, {d.failures} failed")
                  for d in days], caption=f"Runs per day, last {CHART_DAYS} days")
    return RunsPanel(current=RunOut.of(current) if current else None,
                     last_error=RunOut.of(failed) if failed else None, page=page,
                     outcome=outcome, usage=usage, cost_chart=cost, runs_chart=count)


@dataclass(frozen=True)
class SpendPanel:
    today: list[tuple[str, float]]  # (agent id, today's cost), every agent listed
    total_today: float
    chart: Markup


async def spend_panel(pool: asyncpg.Pool, agent_ids: list[str]) -> SpendPanel:
    """The dashboard's spend: today's per agent, and per day across them (30 days)."""
    today = await runs_store.spend_today(pool, agent_ids)
    per_agent = sorted(((a, today.get(a, 0.0)) for a in agent_ids), key=lambda x: -x[1])
    days = await runs_store.spend_by_day(pool, agent_ids, CHART_DAYS)
    chart = bars([Bar(d["day"].strftime("%b %d"), d["cost_usd"],
                      f"{d['day'].isoformat()}: ${d['cost_usd']:.4f} in {d['runs']} runs")
                  for d in days], caption=f"Spend across your agents, last {CHART_DAYS} days",
                 unit="usd")
    return SpendPanel(today=per_agent, total_today=round(sum(today.values()), 6), chart=chart)
