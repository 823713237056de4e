"""One backoff for every reconnect and retry loop of the server processes.

A :class:`Schedule` is the only definition of "how long to wait after the n-th
failure in a row" (exponential, capped, with jitter); a :class:`Backoff` is one
loop's state: it counts the failures, sleeps, logs and increments
``agent_mesh_reconnects_total{component}``, and is reset by the loop once it is
healthy again. :func:`retry` runs a call until it succeeds.

Not tenacity: the loops here are long-lived supervisors (hold a connection until
it drops, reset after a healthy spell, leave early on shutdown) rather than
"retry this call n times"; see docs/decisions/010-worker-process-model.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from app.platform.metrics import RECONNECTS

log = logging.getLogger("mesh.retry")

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Schedule:
    """Delay after the n-th failure in a row: ``min(cap, base·factor^n)``, then
    shortened by up to ``jitter`` (a fraction), so processes that lost the same
    server do not all come back in the same millisecond."""

    base: float = 0.1
    factor: float = 2.0
    cap: float = 5.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if not (self.base > 0 and self.factor >= 1 and self.cap >= self.base
                and 0 <= self.jitter < 1):
            raise ValueError(f"invalid backoff schedule {self!r}: need base > 0, factor >= 1, "
                             "cap >= base and 0 <= jitter < 1")

    def delay(self, failures: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait after ``failures`` (≥ 1) failures in a row."""
        # Exponent bounded so a loop that failed for days cannot overflow a float.
        raw = min(self.cap, self.base * self.factor ** min(max(failures - 1, 0), 64))
        return raw * (1 - self.jitter * rand())


DEFAULT = Schedule()


class Backoff:
    """The state of one retry loop. ``stop`` (optional) cuts a wait short, so a
    SIGTERM is never held up by a long backoff; ``sleep`` and ``rand`` are for
    tests."""

    def __init__(self, component: str, schedule: Schedule = DEFAULT, *,
                 stop: asyncio.Event | None = None, sleep: Sleep | None = None,
                 rand: Callable[[], float] = random.random,
                 logger: logging.Logger | None = None) -> None:
        self.component = component
        self.schedule = schedule
        self.failures = 0
        self._stop = stop
        self._sleep = sleep
        self._rand = rand
        self._log = logger or log
        self._counter = RECONNECTS.labels(component=component)

    @property
    def stopping(self) -> bool:
        return self._stop is not None and self._stop.is_set()

    def reset(self) -> None:
        """The loop is healthy again: the next failure waits ``base`` again."""
        self.failures = 0

    async def wait(self, reason: object) -> bool:
        """Count one retry, log ``reason``, sleep the scheduled delay. Returns False
        (at once, or as soon as ``stop`` is set) when the loop should end instead."""
        if self.stopping:
            return False
        self.failures += 1
        self._counter.inc()
        delay = self.schedule.delay(self.failures, self._rand)
        self._log.warning("%s: %s; retrying in %.2fs (failure %d in a row)", self.component,
                          reason, delay, self.failures)
        await self._pause(delay)
        return not self.stopping

    async def _pause(self, seconds: float) -> None:
        if self._sleep is not None:
            await self._sleep(seconds)
        elif self._stop is None:
            await asyncio.sleep(seconds)
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), seconds)


async def retry(call: Callable[[], Awaitable[T]], backoff: Backoff,
                retry_on: tuple[type[BaseException], ...], what: str = "") -> T:
    """``await call()`` until it returns, backing off after each ``retry_on`` error
    (logged as ``what (error)``). Any other error propagates at once; when the
    backoff's ``stop`` is set, the last ``retry_on`` error is raised."""
    while True:
        try:
            result = await call()
        except retry_on as exc:
            if not await backoff.wait(f"{what} ({exc})" if what else exc):
                raise
            continue
        backoff.reset()
        return result
