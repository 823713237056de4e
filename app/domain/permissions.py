"""Who may talk to whom, and who may see what (DESIGN §2.4).

``can_communicate`` is the one rule: friends, or members of a shared group, or
an owner's virtual-user agent with that owner's own agents.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Relationship:
    """Facts about a pair of agents, read in one query by ``store.social``."""
    friends: bool
    shares_group: bool
    same_owner: bool
    either_virtual_user: bool
    both_exist: bool = True


VIRTUAL_USER = "virtual-user"


def implicitly_friends(*, same_owner: bool, either_virtual_user: bool) -> bool:
    """The owner's human stand-in (its virtual-user agent) is implicitly a friend
    of the owner's own agents: no friendship row, no request needed. The only
    statement of this rule; the friends list (app.services.social) asks it too."""
    return same_owner and either_virtual_user


def can_communicate(rel: Relationship) -> bool:
    if rel.friends or rel.shares_group:
        return True
    return implicitly_friends(same_owner=rel.same_owner,
                              either_virtual_user=rel.either_virtual_user)


def is_participant(agent_id: str, initiator: str, serving_agent: str) -> bool:
    return agent_id in (initiator, serving_agent)


def side_of(agent_id: str, initiator: str, serving_agent: str) -> str:
    return "serving" if agent_id == serving_agent else "initiator"
