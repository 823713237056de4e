"""The A2A task state machine.

Who may move a task: either side may cancel; every other transition is the
serving agent's. Applying a transition is a compare-and-set in the store
(``UPDATE … WHERE state = <expected>``); this module only says what is legal.
"""

from __future__ import annotations

from typing import Literal, get_args

from app.platform.errors import Problem, conflict, forbidden

Side = Literal["initiator", "serving"]

# The one list of states; request validation (app.domain.schemas) and the sets below
# are derived from it. meshd keeps a copy pinned to these names by a test.
TaskState = Literal["submitted", "working", "input-required", "auth-required",
                    "completed", "failed", "canceled", "rejected"]
STATES: frozenset[str] = frozenset(get_args(TaskState))
TERMINAL = frozenset({"completed", "failed", "canceled", "rejected"})
OPEN = STATES - TERMINAL
INITIAL = "submitted"

TRANSITIONS: dict[str, frozenset[str]] = {
    "submitted": frozenset({"working", "canceled", "rejected"}),
    "working": frozenset({"completed", "failed", "canceled", "input-required", "auth-required"}),
    "input-required": frozenset({"working", "submitted", "canceled"}),
    "auth-required": frozenset({"submitted", "canceled"}),
    "completed": frozenset(),
    "failed": frozenset(),
    "canceled": frozenset(),
    "rejected": frozenset(),
}


def is_terminal(state: str) -> bool:
    """Terminal states take no new messages, artifacts or transitions."""
    return state in TERMINAL


def allowed(current: str, new: str) -> bool:
    return new in TRANSITIONS.get(current, frozenset())


def check_transition(current: str, new: str, side: Side) -> None:
    """Raise a 409 for an illegal move and a 403 for a move this side may not make."""
    if not allowed(current, new):
        nexts = sorted(TRANSITIONS.get(current, ()))
        hint = f"allowed from '{current}': {', '.join(nexts)}" if nexts else \
            f"'{current}' is terminal"
        raise conflict(f"cannot move task from '{current}' to '{new}'; {hint}",
                       current_state=current)
    if new != "canceled" and side != "serving":
        raise forbidden(f"only the serving agent may set state '{new}'; "
                        "the initiator may only cancel")


def is_repeat(current: str, new: str, *, set_by: str | None, caller: str) -> bool:
    """Whether moving to ``new`` repeats the change that put the task where it is:
    the task is already in ``new`` and ``caller`` made that move. (No legal move
    keeps the state, so such a request is otherwise a 409.) A repeat is answered
    like the original success and changes nothing (idempotent retries)."""
    return current == new and set_by is not None and set_by == caller


def check_accepts_messages(state: str) -> None:
    if is_terminal(state):
        raise conflict(f"task is '{state}' (terminal) and takes no new messages or artifacts",
                       current_state=state)


def timeout_target() -> str:
    """The state an idle task is moved to by the activity timeout."""
    return "failed"


def raise_lost_race(expected: str, actual: str) -> Problem:
    return conflict(f"task state changed concurrently from '{expected}' to '{actual}'; "
                    "re-read the task and retry", current_state=actual)
