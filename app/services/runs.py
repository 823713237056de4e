"""Agent runs at the gateway (ADR 046): reported by the agents' runtimes, read
by their owners — one record per run, its cost, and the usage per day."""

from __future__ import annotations

import asyncpg

from app.domain import cursors
from app.domain.schemas import RunReport
from app.responses.runs import RunOut, RunPage, TaskUsage, Usage, UsageDay
from app.services import accounts
from app.services.mesh import Mesh
from app.services.principals import Agent, Owner
from app.store import runs as runs_store

USAGE_DAYS_MAX = 366


async def report(mesh: Mesh, me: Agent, body: RunReport) -> tuple[RunOut, bool]:
    """Idempotent on (agent, run_id): (the run as it stands, True when created)."""
    row, created = await runs_store.report(mesh.pool, me.agent_id, body.model_dump())
    return RunOut.of(row), created


async def page(pool: asyncpg.Pool, owner: Owner, agent_id: str, *, limit: int,
               outcome: str | None, cursor: str | None) -> RunPage:
    await accounts.owned_agent(pool, owner, agent_id)
    before = cursors.unkeyset(cursor) if cursor else None
    rows = await runs_store.page(pool, agent_id, limit=limit, outcome=outcome, before=before)
    shown = rows[:limit]
    more = len(rows) > limit
    return RunPage(runs=[RunOut.of(r) for r in shown],
                   next_cursor=cursors.keyset(shown[-1]["started_at"], shown[-1]["run_id"])
                   if more else None)


async def usage(pool: asyncpg.Pool, owner: Owner, agent_id: str, days: int) -> Usage:
    await accounts.owned_agent(pool, owner, agent_id)
    rows = await runs_store.usage_by_day(pool, agent_id, days)
    per_day = [UsageDay(day=r["day"], runs=r["runs"], turns=r["turns"], cost_usd=r["cost_usd"],
                        failures=r["failures"],
                        p50_duration_ms=_ms(r["p50_ms"]), p95_duration_ms=_ms(r["p95_ms"]))
               for r in rows]
    return Usage(agent_id=agent_id, days=per_day,
                 total_cost_usd=round(sum(d.cost_usd for d in per_day), 6),
                 total_runs=sum(d.runs for d in per_day))


async def task_runs(conn: asyncpg.Pool | asyncpg.Connection, task_id: str,
                    owner_id: int) -> list[RunOut]:
    """The runs behind a task by one owner's agents, oldest first."""
    return [RunOut.of(r) for r in await runs_store.of_task(conn, task_id, owner_id)]


def usage_of(runs: list[RunOut]) -> TaskUsage:
    """What a task's runs add up to: the task's cost for their owner."""
    return TaskUsage(runs=len(runs), turns=sum(r.turns for r in runs),
                     cost_usd=round(sum(r.cost_usd for r in runs), 6))


async def task_usage(conn: asyncpg.Pool | asyncpg.Connection, task_id: str,
                     owner_id: int) -> TaskUsage:
    return usage_of(await task_runs(conn, task_id, owner_id))


def _ms(value: float | None) -> int | None:
    return None if value is None else round(value)
