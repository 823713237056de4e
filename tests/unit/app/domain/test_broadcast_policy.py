"""When a broadcast settles: met as soon as enough completed, unmet as soon as
too few can still complete, otherwise keep waiting."""

from __future__ import annotations

import itertools

import pytest

from app.domain.broadcast_policy import outcome, required


def test_required_completions_per_policy() -> None:
    assert required("all", None, 5) == 5
    assert required("any", None, 5) == 1
    assert required("n", 3, 5) == 3


@pytest.mark.parametrize("total", [1, 2, 5])
def test_the_outcome_is_certain_exactly_when_it_says_so(total: int) -> None:
    """Every split of ``total`` recipients into completed / ended otherwise / open."""
    for need in range(1, total + 1):
        for completed, other in itertools.product(range(total + 1), repeat=2):
            still_open = total - completed - other
            if still_open < 0:
                continue
            got = outcome(need, completed=completed, still_open=still_open)
            if completed >= need:
                assert got == "met"
            elif completed + still_open < need:
                assert got == "unmet"  # no way left to reach it: settle now
            else:
                assert got is None


def test_an_any_broadcast_is_met_by_the_first_completion() -> None:
    assert outcome(required("any", None, 3), completed=1, still_open=2) == "met"
    assert outcome(required("all", None, 3), completed=2, still_open=0) == "unmet"
