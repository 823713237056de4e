"""SQL of the agent runs (ADR 046): the report upsert, pages, usage per day."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg

Conn = asyncpg.Connection | asyncpg.Pool

RUN_COLUMNS = ("agent_id, run_id, event_id, task_id, context_id, outcome, turns, "
               "cost_usd::float8 AS cost_usd, duration_ms, model, limit_hit, exit_status, error, "
               "started_at, ended_at")

# A start report creates the row; an end report fills it in. A run that has
# ended keeps its end: a retried start report, or a second end report that
# arrives late, changes nothing (the reply tells which row stands). xmax = 0
# tells an insert from an update.
_REPORT_SQL = f"""
INSERT INTO agent_runs AS r (agent_id, run_id, event_id, task_id, context_id, outcome, turns,
                             cost_usd, duration_ms, model, limit_hit, error, exit_status, ended_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,
        CASE WHEN $6 = 'running' THEN NULL ELSE now() END)
ON CONFLICT (agent_id, run_id) DO UPDATE SET
    event_id = COALESCE(EXCLUDED.event_id, r.event_id),
    task_id = COALESCE(EXCLUDED.task_id, r.task_id),
    context_id = COALESCE(EXCLUDED.context_id, r.context_id),
    outcome = EXCLUDED.outcome, turns = EXCLUDED.turns, cost_usd = EXCLUDED.cost_usd,
    duration_ms = EXCLUDED.duration_ms, model = COALESCE(EXCLUDED.model, r.model),
    limit_hit = EXCLUDED.limit_hit, error = EXCLUDED.error, exit_status = EXCLUDED.exit_status,
    ended_at = EXCLUDED.ended_at
WHERE r.ended_at IS NULL AND EXCLUDED.outcome <> 'running'
RETURNING {RUN_COLUMNS}, (xmax = 0) AS created
"""


async def report(conn: Conn, agent_id: str, run: dict[str, Any]) -> tuple[asyncpg.Record, bool]:
    """Record a report; (the row as it stands, True when this report created it)."""
    row = await conn.fetchrow(
        _REPORT_SQL, agent_id, run["run_id"], run.get("event_id"), run.get("task_id"),
        run.get("context_id"), run["outcome"], run.get("turns", 0), run.get("cost_usd", 0.0),
        run.get("duration_ms"), run.get("model"), run.get("limit_hit"), run.get("error"),
        run.get("exit_status"))
    if row is not None:
        return row, bool(row["created"])
    # Nothing changed (the run had ended): the row as it stands.
    kept = await conn.fetchrow(f"SELECT {RUN_COLUMNS} FROM agent_runs "
                               "WHERE agent_id = $1 AND run_id = $2", agent_id, run["run_id"])
    assert kept is not None
    return kept, False


async def page(conn: Conn, agent_id: str, *, limit: int, outcome: str | None,
               before: tuple[datetime, str] | None) -> list[asyncpg.Record]:
    """Newest first; ``limit + 1`` rows so the caller knows whether there is more."""
    args: list[Any] = [agent_id, limit + 1]
    where = "agent_id = $1"
    if outcome is not None:
        args.append(outcome)
        where += f" AND outcome = ${len(args)}"
    if before is not None:
        args.extend(before)
        where += f" AND (started_at, run_id) < (${len(args) - 1}, ${len(args)})"
    return await conn.fetch(f"SELECT {RUN_COLUMNS} FROM agent_runs WHERE {where} "
                            "ORDER BY started_at DESC, run_id DESC LIMIT $2", *args)


async def usage_by_day(conn: Conn, agent_id: str, days: int) -> list[asyncpg.Record]:
    """Per UTC day of the last ``days`` (today included), every day listed."""
    return await conn.fetch(
        """
        SELECT d.day::date AS day, count(r.run_id) AS runs,
               COALESCE(sum(r.turns), 0)::bigint AS turns,
               COALESCE(sum(r.cost_usd), 0)::float8 AS cost_usd,
               count(r.run_id) FILTER (WHERE r.outcome IN ('failed', 'limit')) AS failures,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY r.duration_ms) AS p50_ms,
               percentile_cont(0.95) WITHIN GROUP (ORDER BY r.duration_ms) AS p95_ms
        FROM generate_series((now() AT TIME ZONE 'UTC')::date - ($2::int - 1),
                             (now() AT TIME ZONE 'UTC')::date, interval '1 day') AS d(day)
        LEFT JOIN agent_runs r ON r.agent_id = $1
             AND (r.started_at AT TIME ZONE 'UTC')::date = d.day::date
        GROUP BY d.day ORDER BY d.day
        """, agent_id, days)


async def spend_by_day(conn: Conn, agent_ids: Sequence[str], days: int) -> list[asyncpg.Record]:
    """Cost per UTC day across ``agent_ids`` for the last ``days`` (today included)."""
    return await conn.fetch(
        """
        SELECT d.day::date AS day, COALESCE(sum(r.cost_usd), 0)::float8 AS cost_usd,
               count(r.run_id) AS runs
        FROM generate_series((now() AT TIME ZONE 'UTC')::date - ($2::int - 1),
                             (now() AT TIME ZONE 'UTC')::date, interval '1 day') AS d(day)
        LEFT JOIN agent_runs r ON r.agent_id = ANY($1::text[])
             AND (r.started_at AT TIME ZONE 'UTC')::date = d.day::date
        GROUP BY d.day ORDER BY d.day
        """, list(agent_ids), days)


async def spend_today(conn: Conn, agent_ids: Sequence[str]) -> dict[str, float]:
    rows = await conn.fetch(
        "SELECT agent_id, sum(cost_usd)::float8 AS cost_usd FROM agent_runs "
        "WHERE agent_id = ANY($1::text[]) "
        "AND started_at >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' "
        "GROUP BY agent_id", list(agent_ids))
    return {r["agent_id"]: r["cost_usd"] for r in rows}


async def budget_use(conn: Conn) -> list[asyncpg.Record]:
    """Every agent with a daily budget: the budget and what it reported spending
    today (UTC)."""
    return await conn.fetch(
        "SELECT a.agent_id, a.daily_budget_usd::float8 AS budget, "
        "COALESCE(sum(r.cost_usd), 0)::float8 AS spent FROM agents a "
        "LEFT JOIN agent_runs r ON r.agent_id = a.agent_id "
        "AND r.started_at >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' "
        "WHERE a.daily_budget_usd IS NOT NULL GROUP BY a.agent_id, a.daily_budget_usd")


async def current(conn: Conn, agent_id: str) -> asyncpg.Record | None:
    """The newest run still running, if any."""
    return await conn.fetchrow(f"SELECT {RUN_COLUMNS} FROM agent_runs WHERE agent_id = $1 "
                               "AND ended_at IS NULL ORDER BY started_at DESC LIMIT 1", agent_id)


async def last_error(conn: Conn, agent_id: str) -> asyncpg.Record | None:
    return await conn.fetchrow(f"SELECT {RUN_COLUMNS} FROM agent_runs WHERE agent_id = $1 "
                               "AND outcome IN ('failed', 'limit') "
                               "ORDER BY started_at DESC LIMIT 1", agent_id)


async def latest(conn: Conn, agent_id: str) -> asyncpg.Record | None:
    """The newest run, running or ended."""
    return await conn.fetchrow(f"SELECT {RUN_COLUMNS} FROM agent_runs WHERE agent_id = $1 "
                               "ORDER BY started_at DESC, run_id DESC LIMIT 1", agent_id)


async def of_task(conn: Conn, task_id: str, owner_id: int) -> list[asyncpg.Record]:
    """The runs behind a task by the agents of one owner, oldest first."""
    return await conn.fetch(
        f"SELECT {RUN_COLUMNS} FROM agent_runs WHERE task_id = $1 "
        "AND agent_id IN (SELECT agent_id FROM agents WHERE owner_id = $2) "
        "ORDER BY started_at, run_id", task_id, owner_id)
