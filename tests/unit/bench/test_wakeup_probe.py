"""The wake-up probe (bench/wakeup_probe.py): its lines, its windows, and one real
sample from the process it starts."""

from __future__ import annotations

from bench.wakeup_probe import Samples, WakeupProbe


def test_a_window_takes_the_median_of_the_samples_inside_it() -> None:
    samples = Samples()
    for line in ("100.0 30.0\n", "101.0 50.0\n", "warning: not a sample\n", "102.0 40.0\n",
                 "103.0 90.0\n"):
        samples.add_line(line)
    assert len(samples.points) == 4
    assert samples.median(100.5, 102.0) == 45.0  # 50 and 40; the edges are inside
    assert samples.median(100.0, 103.0) == 45.0  # 30, 40, 50, 90
    assert samples.median(200.0, 300.0) is None


async def test_the_probe_measures_a_window_and_stops_when_told() -> None:
    async with WakeupProbe(gap_ms=1.0) as probe:
        await probe.first_sample()
    [(at, micros)] = probe.samples.points[:1]
    assert at > 0 and micros > 0
    assert probe._proc is not None and probe._proc.returncode == 0  # ended by the closed stdin
