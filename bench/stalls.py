"""Stalls of the whole machine during a measurement, seen from the bench's own timer.

A thread sleeps a few milliseconds at a time and notes every wake-up later than a
threshold. On a shared virtual machine the host can pause the guest (a snapshot, a
neighbour): then every process stops at once, wrk's requests included, and a level's
p99 says nothing about the mesh. A level's report line names such stalls, so a tail
they explain is not chased in the code.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType


class StallWatch:
    """``with StallWatch() as watch: ...`` then ``watch.stalls``: how late (seconds)
    each late wake-up was."""

    def __init__(self, tick: float = 0.005, threshold: float = 0.1, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.tick = tick
        self.threshold = threshold
        self._clock = clock
        self.stalls: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="stall-watch", daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            start = self._clock()
            self._stop.wait(self.tick)
            late = self._clock() - start - self.tick
            if late > self.threshold:
                self.stalls.append(late)

    def __enter__(self) -> StallWatch:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> str:
        if not self.stalls:
            return "none"
        return f"{len(self.stalls)}, longest {1000 * max(self.stalls):,.0f} ms"
