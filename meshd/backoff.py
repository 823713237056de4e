"""Exponential backoff with jitter, shared by the SDK's retries and the daemon's reconnects."""

from __future__ import annotations

import random
from email.utils import parsedate_to_datetime


class Backoff:
    """Delays ``initial, initial·factor, …`` capped at ``maximum``, each ±``jitter``.

    >>> b = Backoff(1, 30, jitter=0)
    >>> [b.next() for _ in range(7)]
    [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    """

    def __init__(
        self,
        initial: float = 1.0,
        maximum: float = 30.0,
        *,
        factor: float = 2.0,
        jitter: float = 0.1,
        rng: random.Random | None = None,
    ) -> None:
        if initial <= 0 or maximum < initial or factor < 1 or not 0 <= jitter < 1:
            raise ValueError("Backoff needs 0 < initial <= maximum, factor >= 1, 0 <= jitter < 1")
        self.initial = initial
        self.maximum = maximum
        self.factor = factor
        self.jitter = jitter
        self.attempts = 0
        self._rng = rng or random.Random()

    def peek(self) -> float:
        """The un-jittered delay the next call to :meth:`next` is based on."""
        return min(self.maximum, self.initial * self.factor**self.attempts)

    def next(self) -> float:
        base = self.peek()
        self.attempts += 1
        if self.jitter:
            base *= self._rng.uniform(1 - self.jitter, 1 + self.jitter)
        return min(base, self.maximum)

    def reset(self) -> None:
        self.attempts = 0


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or HTTP date); None if absent/bad."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    import time

    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)
