"""Who may talk to whom: the one rule, every way a pair can be related."""

from __future__ import annotations

import itertools

import pytest

from app.domain.permissions import (
    Relationship,
    can_communicate,
    implicitly_friends,
    is_participant,
    side_of,
)


@pytest.mark.parametrize(("same_owner", "virtual", "expected"), [
    (True, True, True), (True, False, True), (False, True, False), (False, False, False)])
def test_implicit_friendship_is_one_rule(same_owner: bool, virtual: bool,
                                          expected: bool) -> None:
    # One owner's agents trust each other, whatever their kind (ADR 030).
    assert implicitly_friends(same_owner=same_owner) is expected
    rel = Relationship(friends=False, shares_group=False, same_owner=same_owner,
                       either_virtual_user=virtual)
    assert can_communicate(rel) is expected
    assert can_communicate(Relationship(True, False, same_owner, virtual))
    assert can_communicate(Relationship(False, True, same_owner, virtual))


def test_a_virtual_user_speaks_for_its_owners_agents() -> None:
    stranger = Relationship(friends=False, shares_group=False, same_owner=False,
                            either_virtual_user=True)
    assert not can_communicate(stranger)
    vouched = Relationship(friends=False, shares_group=False, same_owner=False,
                           either_virtual_user=True, owner_agent_may=True)
    assert can_communicate(vouched)


def test_every_combination_of_facts_follows_the_rule() -> None:
    """All 32 combinations: reach is exactly friends, a shared group, one owner,
    or a virtual user whose owner's agents may reach the other side."""
    for friends, group, owner, virtual, vouched in itertools.product([False, True], repeat=5):
        rel = Relationship(friends=friends, shares_group=group, same_owner=owner,
                           either_virtual_user=virtual, owner_agent_may=vouched)
        assert can_communicate(rel) is (friends or group or owner or vouched), rel


def test_participants_and_sides() -> None:
    assert is_participant("a@x", "a@x", "b@y") and is_participant("b@y", "a@x", "b@y")
    assert not is_participant("c@z", "a@x", "b@y")
    assert side_of("b@y", "a@x", "b@y") == "serving"
    assert side_of("a@x", "a@x", "b@y") == "initiator"
    # A task an agent sent to itself: it serves it.
    assert side_of("a@x", "a@x", "a@x") == "serving"
