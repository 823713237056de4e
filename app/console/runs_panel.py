"""What the agent page shows of an agent's runs: the current run, the last
error, a page of runs (filter by outcome) and cost per day as a chart."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg
from markupsafe import Markup

from app.console.charts import Bar, bars
from app.console.peer_fields import RunFacts, task_runs
from app.domain.schemas import RunOutcome
from app.responses.runs import RunOut, RunPage, TaskUsage, Usage
from app.services import runs as runs_service
from app.services.principals import Owner
from app.store import runs as runs_store

CHART_DAYS = 30
PAGE = 20
OUTCOMES: tuple[str, ...] = RunOutcome.__args__  # type: ignore[attr-defined]


@dataclass(frozen=True)
class LiveRun:
    """The agent page's live block: the run going on now, or the last one."""
    current: RunOut | None
    last: RunOut | None


async def live_run(pool: asyncpg.Pool, agent_id: str) -> LiveRun:
    current = await runs_store.current(pool, agent_id)
    if current is not None:
        return LiveRun(current=RunOut.of(current), last=None)
    last = await runs_store.latest(pool, agent_id)
    return LiveRun(current=None, last=RunOut.of(last) if last else None)


@dataclass(frozen=True)
class RunsPanel:
    live: LiveRun
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
    live = await live_run(pool, agent_id)
    failed = await runs_store.last_error(pool, agent_id)
    days = usage.days
    cost = bars([Bar(d.day.strftime("%b %d"), d.cost_usd,
                     f"{d.day.isoformat()}: ${d.cost_usd:.4f}, {d.runs} runs, {d.turns} turns")
                 for d in days], caption=f"Cost per day, last {CHART_DAYS} days", unit="usd")
    count = bars([Bar(d.day.strftime("%b %d"), float(d.runs),
                      f"{d.day.isoformat()}: {d.runs} runs, {d.failures} failed")
                  for d in days], caption=f"Runs per day, last {CHART_DAYS} days")
    return RunsPanel(live=live,
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


@dataclass(frozen=True)
class MessageRun:
    """What a task page shows beside one message: the run that posted it as the
    gateway recorded it (a run of one of the viewer's agents), else the figures
    the sender's runtime put on the message (a peer's claim, checked for
    plausibility only)."""
    recorded: RunOut | None
    reported: RunFacts | None


@dataclass(frozen=True)
class TaskRuns:
    per_message: list[MessageRun]
    recorded: list[RunOut]  # the viewer's agents' runs on the task, oldest first
    usage: TaskUsage  # their sum
    reported: dict[str, Any]  # what the other agents' messages claim: runs, cost_usd, turns


async def task_runs_view(pool: asyncpg.Pool, owner: Owner, task_id: str, mine: set[str],
                         messages: list[tuple[str, Any]]) -> TaskRuns:
    """The runs behind each message of a task (``(sender, metadata)`` pairs) and the
    task's totals; ``mine`` are the viewer's agent ids."""
    recorded = await runs_service.task_runs(pool, task_id, owner.user_id)
    by_id = {(r.agent_id, r.run_id): r for r in recorded}
    shown, _ = task_runs(messages)
    per_message = []
    for (sender, _), facts in zip(messages, shown, strict=True):
        run_id = facts.run_id if facts is not None else None
        found = by_id.get((sender, run_id)) if sender in mine and run_id else None
        per_message.append(MessageRun(recorded=found, reported=None if found else facts))
    _, others = task_runs([(s, m) for s, m in messages if s not in mine])
    return TaskRuns(per_message=per_message, recorded=recorded,
                    usage=runs_service.usage_of(recorded), reported=others)
