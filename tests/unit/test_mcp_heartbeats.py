"""The heartbeat throttle of /mcp: one write per agent per interval, per process."""

from __future__ import annotations

from app.mcp.presence import Heartbeats


def test_one_beat_per_agent_per_interval() -> None:
    beats = Heartbeats(30.0)
    assert beats.due("a@x", 100.0)
    assert not beats.due("a@x", 129.9)
    assert beats.due("b@x", 129.9)  # another agent has its own clock
    assert beats.due("a@x", 130.0)
    assert not beats.due("a@x", 131.0)


def test_the_map_is_pruned_of_stale_agents() -> None:
    beats = Heartbeats(1.0)
    beats.PRUNE_AT = 3
    for i in range(3):
        assert beats.due(f"a{i}@x", 0.0)
    assert beats.due("late@x", 5.0)  # the stale three go
    assert set(beats._last) == {"late@x"}


def test_interval_zero_beats_every_call() -> None:
    beats = Heartbeats(0.0)
    assert beats.due("a@x", 1.0) and beats.due("a@x", 1.0)
