"""Agents served by an A2A server elsewhere: the registration, the bridge's lease,
and the mesh tasks it forwarded (ADR 041)."""

from __future__ import annotations

from typing import Any

import asyncpg

from app.store.leases import AgentLeases

Conn = asyncpg.Connection | asyncpg.Pool

# What the owner sees (GET /v1/agents/{id}): never the headers' values.
VIEW_COLUMNS = ("card_url, header_names, card, failures, last_error, last_success_at, "
                "next_attempt_at")

# What the bridge needs after each step: where and how to call, the retry state
# and the agent's cursor (read in the same statement).
_LANE = ("r.card_url, r.headers, r.card, r.card_etag, "
         "EXTRACT(EPOCH FROM (now() - r.card_fetched_at))::float8 AS card_age, "
         "r.failures, "
         "GREATEST(EXTRACT(EPOCH FROM (r.next_attempt_at - now())), 0)::float8 AS wait_seconds, "
         "GREATEST(a.acked_seq, a.inbox_floor) AS cursor, a.inbox_seq, a.owner_id, a.kind, "
         "a.status")

# Forwarded tasks that have not settled: followed by the lease holder (GetTask).
_UNSETTLED = ("(t.last_state IS NULL OR t.last_state NOT IN ('completed', 'failed', 'canceled', "
              "'rejected', 'input-required', 'auth-required'))")

LEASES = AgentLeases("a2a_remotes", _LANE, also_due=(
    "EXISTS (SELECT 1 FROM a2a_remote_tasks t WHERE t.agent_id = r.agent_id "
    f"AND t.remote_task_id IS NOT NULL AND {_UNSETTLED})"))


async def create(conn: Conn, *, agent_id: str, card_url: str, headers: str | None,
                 header_names: list[str], card: dict[str, Any], etag: str | None) -> None:
    await conn.execute(
        "INSERT INTO a2a_remotes (agent_id, card_url, headers, header_names, card, card_etag) "
        "VALUES ($1, $2, $3, $4, $5, $6)", agent_id, card_url, headers, header_names, card, etag)


async def view(conn: Conn, agent_id: str) -> asyncpg.Record | None:
    return await conn.fetchrow(f"SELECT {VIEW_COLUMNS} FROM a2a_remotes WHERE agent_id = $1",
                               agent_id)


async def views(conn: Conn, agent_ids: list[str]) -> dict[str, asyncpg.Record]:
    rows = await conn.fetch(f"SELECT agent_id, {VIEW_COLUMNS} FROM a2a_remotes "
                            "WHERE agent_id = ANY($1::text[])", agent_ids)
    return {r["agent_id"]: r for r in rows}


async def card_seen(conn: Conn, agent_id: str, card: dict[str, Any] | None,
                    etag: str | None) -> None:
    """A card re-fetched (``card`` None: unchanged, a 304)."""
    if card is None:
        await conn.execute("UPDATE a2a_remotes SET card_fetched_at = now() WHERE agent_id = $1",
                           agent_id)
    else:
        await conn.execute(
            "UPDATE a2a_remotes SET card = $2, card_etag = $3, card_fetched_at = now(), "
            "updated_at = now() WHERE agent_id = $1", agent_id, card, etag)


async def succeeded(conn: Conn, agent_id: str, owner: str, lease_seconds: float
                    ) -> asyncpg.Record | None:
    """The remote answered: the failure run ends; renews the lease."""
    return await conn.fetchrow(
        f"UPDATE a2a_remotes r SET {LEASES.renewed}, failures = 0, next_attempt_at = now(), "
        f"last_success_at = now() FROM agents a WHERE {LEASES.mine} RETURNING {_LANE}",
        agent_id, owner, lease_seconds)


async def failed(conn: Conn, agent_id: str, owner: str, lease_seconds: float, *,
                 error: str, failures: int, retry_in: float) -> asyncpg.Record | None:
    """The remote could not be reached; renews the lease."""
    return await conn.fetchrow(
        f"UPDATE a2a_remotes r SET {LEASES.renewed}, failures = $4, "
        "next_attempt_at = now() + make_interval(secs => $5), last_error = $6 "
        f"FROM agents a WHERE {LEASES.mine} RETURNING {_LANE}",
        agent_id, owner, lease_seconds, failures, retry_in, error)


async def note_error(conn: Conn, agent_id: str, error: str) -> None:
    """An error of one task (the remote refused it): shown, not retried."""
    await conn.execute("UPDATE a2a_remotes SET last_error = $2 WHERE agent_id = $1",
                       agent_id, error)


# --- forwarded tasks -------------------------------------------------------------------

async def remote_task(conn: Conn, task_id: str) -> asyncpg.Record | None:
    return await conn.fetchrow(
        "SELECT task_id, agent_id, remote_task_id, remote_context_id, last_state, "
        "sending_message_id FROM a2a_remote_tasks WHERE task_id = $1", task_id)


async def sending(conn: Conn, task_id: str, agent_id: str, message_id: str) -> None:
    """``message_id`` is about to be sent to the remote (see the column)."""
    await conn.execute(
        "INSERT INTO a2a_remote_tasks (task_id, agent_id, sending_message_id) "
        "VALUES ($1, $2, $3) ON CONFLICT (task_id) DO UPDATE SET "
        "sending_message_id = EXCLUDED.sending_message_id, updated_at = now()",
        task_id, agent_id, message_id)


async def record_task(conn: Conn, task_id: str, agent_id: str, remote_task_id: str | None,
                      remote_context_id: str | None) -> None:
    """The remote accepted a message of the task: its answer is now awaited."""
    await conn.execute(
        "INSERT INTO a2a_remote_tasks (task_id, agent_id, remote_task_id, remote_context_id) "
        "VALUES ($1, $2, $3, $4) ON CONFLICT (task_id) DO UPDATE SET last_state = NULL, "
        "sending_message_id = NULL, "
        "remote_task_id = COALESCE(EXCLUDED.remote_task_id, a2a_remote_tasks.remote_task_id), "
        "remote_context_id = COALESCE(EXCLUDED.remote_context_id, "
        "                             a2a_remote_tasks.remote_context_id), updated_at = now()",
        task_id, agent_id, remote_task_id, remote_context_id)


async def set_state(conn: Conn, task_id: str, state: str) -> None:
    await conn.execute("UPDATE a2a_remote_tasks SET last_state = $2, updated_at = now() "
                       "WHERE task_id = $1", task_id, state)


async def open_tasks(conn: Conn, agent_id: str) -> list[asyncpg.Record]:
    """Forwarded tasks that have not settled (to follow after a restart or a
    takeover): NULL is a message in flight, its answer not yet seen."""
    return await conn.fetch(
        "SELECT task_id, remote_task_id, remote_context_id, last_state FROM a2a_remote_tasks t "
        f"WHERE agent_id = $1 AND remote_task_id IS NOT NULL AND {_UNSETTLED} "
        "ORDER BY created_at", agent_id)
