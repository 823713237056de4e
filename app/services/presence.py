"""Heartbeats and online state."""

from __future__ import annotations

import asyncpg

from app.platform.errors import not_found
from app.responses import Presence
from app.services.principals import Agent
from app.store import agents as agents_store


def _shape(row: asyncpg.Record | None, agent_id: str) -> Presence:
    if row is None:
        raise not_found(f"unknown agent '{agent_id}'")
    return Presence.of(row, agent_id=agent_id)


async def heartbeat(pool: asyncpg.Pool, me: Agent) -> Presence:
    return _shape(await agents_store.heartbeat(pool, me.agent_id), me.agent_id)


async def go_online(pool: asyncpg.Pool, me: Agent) -> Presence:
    return _shape(await agents_store.set_active(pool, me.agent_id), me.agent_id)


async def go_draining(pool: asyncpg.Pool, me: Agent) -> Presence:
    return _shape(await agents_store.set_draining(pool, me.agent_id), me.agent_id)


async def go_inactive(pool: asyncpg.Pool, me: Agent) -> Presence:
    return _shape(await agents_store.set_inactive(pool, me.agent_id), me.agent_id)
