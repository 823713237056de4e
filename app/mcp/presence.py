"""A remote MCP client's calls count as its agent's heartbeat: no daemon of its own
beats for it. Throttled per agent in each web process, since a heartbeat is a write."""

from __future__ import annotations

import time

import asyncpg

from app.platform.errors import Problem
from app.services import presence
from app.services.principals import Agent


class Heartbeats:
    # Entries older than the interval are dropped once the map grows past this.
    PRUNE_AT = 10_000

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._last: dict[str, float] = {}

    def due(self, agent_id: str, now: float) -> bool:
        last = self._last.get(agent_id)
        if last is not None and now - last < self.interval:
            return False
        if len(self._last) >= self.PRUNE_AT:
            self._last = {a: t for a, t in self._last.items() if now - t < self.interval}
        self._last[agent_id] = now
        return True

    async def beat(self, pool: asyncpg.Pool, me: Agent) -> None:
        if not self.due(me.agent_id, time.monotonic()):
            return
        try:
            await presence.heartbeat(pool, me)
        except Problem:  # deleted since it authenticated: the call itself will say so
            self._last.pop(me.agent_id, None)
