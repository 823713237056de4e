"""app/platform/retry.py in-process: the one backoff schedule, its reset and stop, and the
``agent_mesh_reconnects_total{component}`` counter. No services, no real sleeps:
the sleep is injected and records the delays it was asked for."""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest
from prometheus_client import REGISTRY

from app.platform.retry import DEFAULT, Backoff, Schedule, retry


class Sleeps:
    """A stand-in for asyncio.sleep that returns at once and remembers the delays."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def reconnects(component: str) -> float:
    return REGISTRY.get_sample_value("agent_mesh_reconnects_total",
                                     {"component": component}) or 0.0


def component() -> str:
    return f"test-{uuid.uuid4().hex[:6]}"


def test_schedule_grows_by_factor_up_to_the_cap() -> None:
    s = Schedule(base=0.1, factor=2.0, cap=1.0, jitter=0.0)
    assert [s.delay(n) for n in range(1, 7)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    # Days of failures neither overflow nor pass the cap.
    assert s.delay(10_000) == 1.0


def test_jitter_only_shortens_a_delay_and_by_at_most_its_fraction() -> None:
    s = Schedule(base=1.0, factor=2.0, cap=4.0, jitter=0.25)
    assert s.delay(3, rand=lambda: 0.0) == 4.0
    assert s.delay(3, rand=lambda: 0.999999) == pytest.approx(3.0, abs=1e-5)
    assert s.delay(1, rand=lambda: 0.5) == pytest.approx(0.875)


def test_the_default_schedule() -> None:
    assert (DEFAULT.base, DEFAULT.factor, DEFAULT.cap, DEFAULT.jitter) == (0.1, 2.0, 5.0, 0.2)


@pytest.mark.parametrize("bad", [{"base": 0}, {"factor": 0.5}, {"base": 2, "cap": 1},
                                 {"jitter": 1.0}, {"jitter": -0.1}])
def test_a_nonsense_schedule_is_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="invalid backoff schedule"):
        Schedule(**bad)


async def test_backoff_sleeps_the_schedule_counts_every_retry_and_resets() -> None:
    name = component()
    sleeps = Sleeps()
    backoff = Backoff(name, Schedule(base=0.5, factor=3.0, cap=10.0, jitter=0.0), sleep=sleeps)
    before = reconnects(name)
    for _ in range(4):
        assert await backoff.wait("down") is True
    assert sleeps.delays == pytest.approx([0.5, 1.5, 4.5, 10.0])
    assert backoff.failures == 4
    assert reconnects(name) - before == 4
    backoff.reset()
    await backoff.wait("down again")
    assert sleeps.delays[-1] == pytest.approx(0.5)  # healthy in between: from base again
    assert reconnects(name) - before == 5


async def test_backoff_logs_the_component_the_reason_and_the_delay(
        caplog: pytest.LogCaptureFixture) -> None:
    name = component()
    backoff = Backoff(name, Schedule(jitter=0.0), sleep=Sleeps())
    with caplog.at_level(logging.WARNING, logger="mesh.retry"):
        await backoff.wait("lost Redis (connection refused)")
    assert f"{name}: lost Redis (connection refused); retrying in 0.10s" in caplog.text


async def test_a_stop_request_ends_the_wait_without_counting() -> None:
    name = component()
    stop = asyncio.Event()
    stop.set()
    backoff = Backoff(name, stop=stop)
    assert await backoff.wait("down") is False
    assert reconnects(name) == 0
    assert backoff.failures == 0


async def test_a_stop_request_cuts_a_long_wait_short() -> None:
    """The real sleep (none injected) returns as soon as stop is set."""
    stop = asyncio.Event()
    backoff = Backoff(component(), Schedule(base=3600.0, cap=3600.0), stop=stop)
    waiting = asyncio.create_task(backoff.wait("down"))
    await asyncio.sleep(0)  # let it start sleeping
    stop.set()
    assert await asyncio.wait_for(waiting, 5) is False


async def test_retry_returns_once_the_call_succeeds(caplog: pytest.LogCaptureFixture) -> None:
    name = component()
    sleeps = Sleeps()
    outcomes: list[Exception | str] = [ConnectionError("a"), OSError("b"), "ok"]

    async def call() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    backoff = Backoff(name, Schedule(jitter=0.0), sleep=sleeps)
    assert await retry(call, backoff, (OSError,), "the service is down") == "ok"
    assert sleeps.delays == pytest.approx([0.1, 0.2])
    assert backoff.failures == 0  # reset by the success
    assert reconnects(name) == 2
    assert f"{name}: the service is down (b); retrying in 0.20s" in caplog.text


async def test_retry_lets_other_errors_through_at_once() -> None:
    sleeps = Sleeps()

    async def call() -> None:
        raise ValueError("a bug, not an outage")

    with pytest.raises(ValueError):
        await retry(call, Backoff(component(), sleep=sleeps), (OSError,))
    assert sleeps.delays == []


async def test_retry_gives_up_with_the_last_error_when_stopped() -> None:
    stop = asyncio.Event()
    calls = 0

    async def call() -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            stop.set()  # SIGTERM arrives while the dependency is still down
        raise ConnectionRefusedError(f"attempt {calls}")

    with pytest.raises(ConnectionRefusedError, match="attempt 2"):
        await retry(call, Backoff(component(), stop=stop, sleep=Sleeps()), (OSError,))
    assert calls == 2
