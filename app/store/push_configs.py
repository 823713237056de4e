"""A2A push-notification configs: registration, the delivery lease and the
breaker's state (ADR 039). The lease and breaker statements are the same as
agent_webhooks' (app.store.webhooks, ADR 035); the cursor is the row's own
``last_seq`` in the registering agent's inbox, filtered to the task."""

from __future__ import annotations

import asyncpg

Conn = asyncpg.Connection | asyncpg.Pool

# What the registering agent sees (Get/List): never the sealed secrets.
_VIEW = "config_id, task_id, url, auth_scheme, (token IS NOT NULL) AS has_token"

# What a delivering process needs after each step (the shape workers.webhook's
# lane loop reads: url, failures, breaker, opens, wait_seconds, cursor).
_LANE = ("p.push_id, p.agent_id, p.task_id, p.url, p.token, p.auth_scheme, "
         "p.auth_credentials, p.failures, p.breaker, p.opens, "
         "GREATEST(EXTRACT(EPOCH FROM (p.next_attempt_at - now())), 0)::float8 AS wait_seconds, "
         "p.last_seq AS cursor")

_LEASE = "lease_until = now() + make_interval(secs => $3)"
_MINE = "p.push_id = $1 AND p.lease_owner = $2"


async def put(conn: Conn, agent_id: str, task_id: str, config_id: str, url: str, *,
              token: str | None, auth_scheme: str | None, auth_credentials: str | None,
              after_seq: int, limit: int) -> asyncpg.Record | None:
    """Register or replace (by config id); a replacement keeps its cursor and
    starts healthy. None when the agent already has ``limit`` other configs on
    the task. The count and the insert are one statement, so two racing creates
    cannot both pass the check by much (at most one each)."""
    return await conn.fetchrow(
        "INSERT INTO task_push_configs (agent_id, task_id, config_id, url, token, auth_scheme, "
        " auth_credentials, last_seq) "
        "SELECT $1, $2, $3, $4, $5, $6, $7, $8 WHERE (SELECT count(*) FROM task_push_configs "
        " WHERE agent_id = $1 AND task_id = $2 AND config_id <> $3) < $9 "
        "ON CONFLICT (agent_id, task_id, config_id) DO UPDATE SET url = EXCLUDED.url, "
        " token = EXCLUDED.token, auth_scheme = EXCLUDED.auth_scheme, "
        " auth_credentials = EXCLUDED.auth_credentials, failures = 0, breaker = 'closed', "
        " opens = 0, next_attempt_at = now(), last_error = NULL, updated_at = now() "
        f"RETURNING push_id, {_VIEW}", agent_id, task_id, config_id, url, token, auth_scheme,
        auth_credentials, after_seq, limit)


async def get(conn: Conn, agent_id: str, task_id: str, config_id: str) -> asyncpg.Record | None:
    return await conn.fetchrow(
        f"SELECT {_VIEW} FROM task_push_configs WHERE agent_id = $1 AND task_id = $2 "
        "AND config_id = $3", agent_id, task_id, config_id)


async def list_for(conn: Conn, agent_id: str, task_id: str, after_id: str, limit: int
                   ) -> list[asyncpg.Record]:
    """One agent's configs on a task, by config id, after ``after_id``."""
    return await conn.fetch(
        f"SELECT {_VIEW} FROM task_push_configs WHERE agent_id = $1 AND task_id = $2 "
        "AND config_id > $3 ORDER BY config_id LIMIT $4", agent_id, task_id, after_id, limit)


async def delete(conn: Conn, agent_id: str, task_id: str, config_id: str) -> bool:
    result = await conn.execute(
        "DELETE FROM task_push_configs WHERE agent_id = $1 AND task_id = $2 AND config_id = $3",
        agent_id, task_id, config_id)
    return result.endswith(" 1")


async def of_agent(conn: Conn, agent_id: str) -> list[int]:
    """The configs registered by one agent (a registration notice names only it)."""
    rows = await conn.fetch("SELECT push_id FROM task_push_configs WHERE agent_id = $1",
                            agent_id)
    return [int(r["push_id"]) for r in rows]


# --- delivery (workers.webhook) --------------------------------------------------------

async def claim(conn: Conn, push_id: int, owner: str, lease_seconds: float
                ) -> asyncpg.Record | None:
    return await conn.fetchrow(
        f"UPDATE task_push_configs p SET lease_owner = $2, {_LEASE} WHERE p.push_id = $1 "
        "AND (p.lease_until IS NULL OR p.lease_until < now() OR p.lease_owner = $2) "
        f"RETURNING {_LANE}", push_id, owner, lease_seconds)


async def renew(conn: Conn, push_id: int, owner: str, lease_seconds: float
                ) -> asyncpg.Record | None:
    return await conn.fetchrow(
        f"UPDATE task_push_configs p SET {_LEASE} WHERE {_MINE} RETURNING {_LANE}",
        push_id, owner, lease_seconds)


async def peek(conn: Conn, push_id: int, owner: str) -> asyncpg.Record | None:
    """Re-read a config under a live lease this process holds, writing nothing."""
    return await conn.fetchrow(
        f"SELECT {_LANE} FROM task_push_configs p WHERE {_MINE} AND p.lease_until > now()",
        push_id, owner)


async def succeeded(conn: Conn, push_id: int, owner: str, lease_seconds: float, seq: int
                    ) -> asyncpg.Record | None:
    """A 2xx for the event ``seq``: the cursor moves past it, the breaker closes."""
    return await conn.fetchrow(
        f"UPDATE task_push_configs p SET {_LEASE}, last_seq = GREATEST(p.last_seq, $4), "
        "failures = 0, breaker = 'closed', opens = 0, next_attempt_at = now(), "
        f"last_success_at = now() WHERE {_MINE} RETURNING {_LANE}",
        push_id, owner, lease_seconds, seq)


async def failed(conn: Conn, push_id: int, owner: str, lease_seconds: float, *,
                 error: str, failures: int, breaker: str, opens: int,
                 retry_in: float) -> asyncpg.Record | None:
    return await conn.fetchrow(
        f"UPDATE task_push_configs p SET {_LEASE}, failures = $4, breaker = $5, opens = $6, "
        "next_attempt_at = now() + make_interval(secs => $7), last_error = $8, "
        f"last_failure_at = now() WHERE {_MINE} RETURNING {_LANE}",
        push_id, owner, lease_seconds, failures, breaker, opens, retry_in, error)


_PENDING = ("EXISTS (SELECT 1 FROM inbox_events i WHERE i.agent_id = p.agent_id "
            "AND i.task_id = p.task_id AND i.seq > p.last_seq)")


async def release(conn: Conn, push_id: int, owner: str) -> bool:
    """Give the lease up; True when the task's events are waiting."""
    pending = await conn.fetchval(
        "UPDATE task_push_configs p SET lease_owner = NULL, lease_until = NULL "
        f"WHERE {_MINE} RETURNING {_PENDING} AND p.next_attempt_at <= now()", push_id, owner)
    return bool(pending)


async def sweep(conn: Conn, limit: int) -> list[asyncpg.Record]:
    """Every config, its agent and whether it is due now (the safety net)."""
    return await conn.fetch(
        f"SELECT p.push_id, p.agent_id, ({_PENDING} AND p.next_attempt_at <= now() "
        " AND (p.lease_until IS NULL OR p.lease_until < now())) AS due "
        "FROM task_push_configs p ORDER BY p.push_id LIMIT $1", limit)
