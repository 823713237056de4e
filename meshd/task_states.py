"""The A2A task states and the moves between them, as meshd knows them.

The gateway decides what is legal (``app/domain/task_states.py``); meshd keeps
this copy only to validate arguments early and to tell an LLM which moves exist.
``tests/unit/meshd/test_task_states.py`` pins it to the gateway's, so the two cannot drift.
"""

from __future__ import annotations

from typing import Literal, get_args

TaskState = Literal[
    "submitted",
    "working",
    "input-required",
    "auth-required",
    "completed",
    "failed",
    "canceled",
    "rejected",
]
# In lifecycle order, for help texts and `--state` choices.
STATES: tuple[str, ...] = get_args(TaskState)
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "canceled", "rejected"})
# Either side may cancel; the serving agent makes every other move. Terminal states have none.
TRANSITIONS: dict[str, frozenset[str]] = {
    "submitted": frozenset({"working", "canceled", "rejected"}),
    "working": frozenset({"completed", "failed", "canceled", "input-required", "auth-required"}),
    "input-required": frozenset({"working", "submitted", "canceled"}),
    "auth-required": frozenset({"submitted", "canceled"}),
}


def transitions_text() -> str:
    """``submitted → canceled|rejected|working; …``: the moves, for error messages."""
    return "; ".join(f"{a} → {'|'.join(sorted(b))}" for a, b in TRANSITIONS.items())
