"""meshd's copy of the task state machine is the gateway's."""

from typing import get_args

from app.domain import task_states as gateway
from meshd import task_states
from tests.meshd.support import REPO


def test_states_and_terminal_states_are_the_gateways():
    assert set(task_states.STATES) == set(gateway.STATES)
    assert task_states.TERMINAL == gateway.TERMINAL
    assert task_states.STATES == get_args(task_states.TaskState)


def test_transitions_are_the_gateways():
    # The gateway may list terminal states with no moves; meshd leaves them out.
    theirs = {state: frozenset(nexts) for state, nexts in gateway.TRANSITIONS.items() if nexts}
    assert task_states.TRANSITIONS == theirs


def test_the_help_text_lists_every_move():
    text = task_states.transitions_text()
    assert "submitted → canceled|rejected|working" in text
    assert "completed" not in text.split("; ")[0]


def test_no_other_meshd_module_spells_out_the_states():
    """One copy: other modules import it rather than repeating the table."""
    owners = {
        str(p.relative_to(REPO)) for p in (REPO / "meshd").rglob("*.py") if '"auth-required"' in p.read_text()
    }
    assert owners == {"meshd/task_states.py"}
