"""The task state machine, in-process (no services)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import get_args

import pytest
from pydantic import ValidationError

from app.domain import task_states
from app.domain.event_wire import format_timestamp
from app.domain.schemas import StatusChange
from app.platform.errors import Problem
from app.responses import TaskOut
from tests.api_helpers import ALLOWED

SIDES = ("initiator", "serving")


def test_one_list_of_states_and_the_sets_derived_from_it() -> None:
    assert task_states.STATES == frozenset(get_args(task_states.TaskState)) == frozenset(ALLOWED)
    assert task_states.TERMINAL == {"completed", "failed", "canceled", "rejected"}
    assert task_states.OPEN == task_states.STATES - task_states.TERMINAL
    assert task_states.INITIAL in task_states.OPEN
    assert set(task_states.TRANSITIONS) == task_states.STATES


def test_transition_table_is_design_section_3() -> None:
    assert {k: set(v) for k, v in task_states.TRANSITIONS.items()} == ALLOWED
    for state in task_states.TERMINAL:
        assert not task_states.TRANSITIONS[state] and task_states.is_terminal(state)


@pytest.mark.parametrize("src", sorted(ALLOWED))
@pytest.mark.parametrize("dst", sorted(ALLOWED))
@pytest.mark.parametrize("side", SIDES)
def test_check_transition(src: str, dst: str, side: str) -> None:
    if dst not in ALLOWED[src]:
        with pytest.raises(Problem) as caught:
            task_states.check_transition(src, dst, side)  # type: ignore[arg-type]
        assert caught.value.status == 409 and caught.value.extra["current_state"] == src
        assert ("terminal" in caught.value.detail) == (src in task_states.TERMINAL)
    elif side == "initiator" and dst != "canceled":
        with pytest.raises(Problem) as caught:
            task_states.check_transition(src, dst, side)  # type: ignore[arg-type]
        assert caught.value.status == 403
    else:
        task_states.check_transition(src, dst, side)  # type: ignore[arg-type]


def test_no_legal_move_keeps_the_state() -> None:
    """Why a same-state request can only be a repeat (is_repeat) or a 409."""
    assert all(state not in nexts for state, nexts in task_states.TRANSITIONS.items())


def test_is_repeat_needs_the_same_state_and_the_same_agent() -> None:
    assert task_states.is_repeat("completed", "completed", set_by="b@x", caller="b@x")
    assert not task_states.is_repeat("completed", "completed", set_by="b@x", caller="a@x")
    assert not task_states.is_repeat("working", "completed", set_by="b@x", caller="b@x")
    # The initial state and system moves (the timeout) were set by nobody.
    assert not task_states.is_repeat("failed", "failed", set_by=None, caller="b@x")


def test_terminal_tasks_take_no_messages() -> None:
    for state in sorted(task_states.STATES):
        if state in task_states.TERMINAL:
            with pytest.raises(Problem) as caught:
                task_states.check_accepts_messages(state)
            assert caught.value.status == 409
        else:
            task_states.check_accepts_messages(state)
    assert task_states.timeout_target() in task_states.TERMINAL


def test_lost_race_is_a_409_naming_the_current_state() -> None:
    problem = task_states.raise_lost_race("working", "canceled")
    assert problem.status == 409 and problem.extra["current_state"] == "canceled"


def test_request_validation_uses_the_same_states() -> None:
    for state in sorted(task_states.STATES):
        assert StatusChange.model_validate({"state": state}).state == state
    with pytest.raises(ValidationError):
        StatusChange.model_validate({"state": "done"})


def test_timestamps_are_the_utc_instant_with_microseconds() -> None:
    utc = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    assert format_timestamp(utc) == utc.isoformat() == "2026-01-02T03:04:05.123456+00:00"
    # An instant in another zone (a session time zone) is the same instant in UTC.
    elsewhere = utc.astimezone(timezone(timedelta(hours=-5)))
    assert format_timestamp(elsewhere) == utc.isoformat()
    task = TaskOut(task_id="t-1", context_id="c-1", state="working", initiator="a@x",
                   serving_agent="b@x", status_message=None, created_at=elsewhere,
                   updated_at=utc.replace(microsecond=0))
    wire = task.wire()
    assert wire["created_at"] == "2026-01-02T03:04:05.123456+00:00"
    # Fixed width, as in inbox events: isoformat() alone would drop a zero fraction.
    assert wire["updated_at"] == "2026-01-02T03:04:05.000000+00:00"
