"""The daemon's settings and counters, and the stop signal its parts share.

Every default is declared here once: ``mesh daemon``'s options take theirs
from :class:`DaemonOptions`, and docs/meshd.md lists the same numbers
(``tests/meshd/test_docs.py`` checks that it does).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from meshd.daemon.state import DEFAULT_WINDOW

Transport = Literal["auto", "sse", "poll"]
# The gateway answers a long-poll after at most this long (``wait`` ≤ 30 s).
MAX_POLL_WAIT = 30.0


@dataclass
class DaemonOptions:
    state_dir: Path | None = None
    window: int = DEFAULT_WINDOW
    transport: Transport = "auto"
    heartbeat_interval: float = 30.0
    reconnect_initial: float = 1.0
    reconnect_max: float = 30.0
    poll_wait: float = 25.0
    poll_limit: int = 100
    sse_read_timeout: float = 60.0
    # A stream that delivered an event or stayed up this long resets the SSE backoff.
    sse_healthy_after: float = 5.0
    attempts: int = 3
    retry_initial: float = 1.0
    retry_max: float = 30.0
    shutdown_grace: float = 15.0
    offline_timeout: float = 3.0
    reply: bool = True
    install_signal_handlers: bool = True


@dataclass
class DaemonStats:
    handled: int = 0
    duplicates: int = 0
    gave_up: int = 0
    taken_elsewhere: int = 0  # claimed first by another reader of the agent
    mode: str = "starting"


class Stopped(Exception):
    """Unwinds the daemon's loops between steps once a stop was requested."""


class StopSignal:
    """Set once on SIGTERM/SIGINT; every wait in the daemon ends early when it is."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    @property
    def is_set(self) -> bool:
        return self._event.is_set()

    def set(self) -> None:
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()

    async def sleep(self, seconds: float) -> None:
        """Sleep, or raise :class:`Stopped` as soon as a stop is requested."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, seconds)):
                await self._event.wait()
        if self.is_set:
            raise Stopped
