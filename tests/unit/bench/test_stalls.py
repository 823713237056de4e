"""The bench's stall watch: a wake-up later than the threshold is noted, one on time
is not. The watch's clock is handed in, so a stall is a jump of that clock."""

from __future__ import annotations

import threading
import time

from bench.stalls import StallWatch


class JumpingClock:
    """Real time, plus the seconds handed to :meth:`stall` from the moment it is called —
    what the watch sees when the machine stops between two of its readings."""

    def __init__(self) -> None:
        self.extra = 0.0
        self.read = threading.Event()

    def __call__(self) -> float:
        self.read.set()
        return time.monotonic() + self.extra

    def stall(self, seconds: float) -> None:
        self.extra += seconds


def test_a_wake_up_later_than_the_threshold_is_a_stall_and_one_on_time_is_not() -> None:
    clock = JumpingClock()
    with StallWatch(tick=0.001, threshold=5.0, clock=clock) as watch:
        assert clock.read.wait(5)
        time.sleep(0.02)  # some ticks on time
        clock.stall(22.0)
        time.sleep(0.02)
    assert len(watch.stalls) == 1 and 22.0 <= watch.stalls[0] < 27.0
    assert watch.summary().startswith("1, longest 22,")


def test_no_stall_is_none() -> None:
    with StallWatch(threshold=10.0) as watch:
        time.sleep(0.05)
    assert watch.stalls == [] and watch.summary() == "none"
