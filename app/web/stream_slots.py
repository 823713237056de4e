"""A cap on concurrent streams per holder in one web process.

An agent needs one inbox stream (two during a reconnect); a runaway client
opening hundreds would hold that many coroutines and Redis reads. The console's
live feed is capped per owner the same way (ADR 032): each feed holds a reader
per agent of the owner. Past the cap a new stream is a 429 before it starts.
Per process, like the hub: with N web processes behind a balancer a holder may
hold up to N times the cap.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

from app.platform.errors import Problem


class Lease:
    """One open stream's slot; releasing twice is harmless (the response's
    finally, and this object's end for a response that was never sent)."""

    __slots__ = ("_agent_id", "_slots", "released")

    def __init__(self, slots: StreamSlots, agent_id: str) -> None:
        self._slots = slots
        self._agent_id = agent_id
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self._slots._release(self._agent_id)

    # Not weakref.finalize on the response: a finalizer per stream is a registry
    # entry, a weakref and an info object (~0.3 KB) for ten thousand idle streams.
    __del__ = release


def inbox_refusal(agent_id: str, open_now: int) -> str:
    return (f"'{agent_id}' already has {open_now} open inbox streams on this server "
            "(the limit); close one, or use one stream per agent")


def feed_refusal(holder: str, open_now: int) -> str:
    return (f"you already have {open_now} open live-feed streams on this server (the limit); "
            "close a console tab showing the feed and reload")


class StreamSlots:
    def __init__(self, per_agent: int,
                 refusal: Callable[[str, int], str] = inbox_refusal) -> None:
        self.per_agent = per_agent if per_agent > 0 else math.inf
        self._refusal = refusal
        self._open: Counter[str] = Counter()

    def acquire(self, agent_id: str) -> Lease:
        if self._open[agent_id] >= self.per_agent:
            raise Problem(429, self._refusal(agent_id, self._open[agent_id]),
                          headers={"Retry-After": "5"})
        self._open[agent_id] += 1
        return Lease(self, agent_id)

    def open_streams(self, agent_id: str) -> int:
        return self._open[agent_id]

    def _release(self, agent_id: str) -> None:
        self._open[agent_id] -= 1
        if self._open[agent_id] <= 0:
            del self._open[agent_id]
