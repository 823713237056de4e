"""The daemon's per-event work, in process: handler retries and the replies it stores."""

from __future__ import annotations

import pytest

from meshd.daemon.handlers import HandlerContext, HandlerError
from meshd.daemon.retries import fail_action, reply_action, run_with_retries
from meshd.models import InboxEvent
from meshd.options import DaemonOptions, Stopped, StopSignal
from tests.unit.meshd.test_models import EVENT

OPT = DaemonOptions(attempts=3, retry_initial=1e-6, retry_max=1e-6)


class Flaky:
    name = "flaky"

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.attempts: list[int] = []

    async def __call__(self, event: InboxEvent, ctx: HandlerContext) -> str:
        self.attempts.append(ctx.attempt)
        if len(self.attempts) <= self.failures:
            raise HandlerError(f"attempt {ctx.attempt} failed")
        return f"ok after {ctx.attempt}"


async def test_retries_until_the_handler_succeeds():
    h = Flaky(failures=2)
    event = InboxEvent.model_validate(EVENT)
    assert await run_with_retries(h, event, None, "b@x", OPT, StopSignal()) == "ok after 3"  # type: ignore[arg-type]
    assert h.attempts == [1, 2, 3]


async def test_gives_up_with_the_last_error():
    h = Flaky(failures=5)
    with pytest.raises(HandlerError, match="attempt 3 failed"):
        await run_with_retries(h, InboxEvent.model_validate(EVENT), None, "b@x", OPT, StopSignal())  # type: ignore[arg-type]
    assert h.attempts == [1, 2, 3]


async def test_a_stop_ends_the_wait_between_attempts():
    stop = StopSignal()
    stop.set()
    h = Flaky(failures=5)
    slow = DaemonOptions(attempts=3, retry_initial=3600, retry_max=3600)
    with pytest.raises(Stopped):
        await run_with_retries(h, InboxEvent.model_validate(EVENT), None, "b@x", slow, stop)  # type: ignore[arg-type]
    assert h.attempts == [1]


def test_a_reply_has_the_same_id_every_time_for_the_same_event():
    event = InboxEvent.model_validate(EVENT)
    first = reply_action("b@x", event, "the answer")
    again = reply_action("b@x", InboxEvent.model_validate(EVENT), "another run, another text")
    assert first["message_id"] == again["message_id"]
    assert first["message_id"].startswith("m-b@x-1796032800123-")  # the event's created_at, in ms
    assert first["parts"] == [{"kind": "text", "text": "the answer"}]
    parts = [{"kind": "data", "data": {"x": 1}}]
    assert reply_action("b@x", event, parts)["parts"] == parts
    other = InboxEvent.model_validate({**EVENT, "event_id": "e-other"})
    assert reply_action("b@x", other, "x")["message_id"] != first["message_id"]


def test_a_failure_keeps_a_bounded_error():
    action = fail_action("t-1", HandlerError("x" * 10_000))
    assert action["kind"] == "fail" and action["task_id"] == "t-1" and len(action["error"]) == 4000
