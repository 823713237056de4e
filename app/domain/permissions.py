"""Who may talk to whom, and who may see what.

``can_communicate`` is the one rule: friends, or members of a shared group, or
two agents of one owner (its own agents, its virtual user among them, trust each
other: ADR 030) — and an owner's virtual-user agent with any agent one of that
owner's own agents may talk to (the human speaks for its agents).
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
    # One side is an owner's virtual user, and one of that owner's own agents is a
    # friend of (or shares a group with) the other side.
    owner_agent_may: bool = False
    both_exist: bool = True


VIRTUAL_USER = "virtual-user"


def implicitly_friends(*, same_owner: bool) -> bool:
    """One owner's agents — its virtual user (the human stand-in) and its normal
    agents alike — are implicitly friends of each other: no friendship row, no
    request needed; one owner runs them all (ADR 030). The only statement of this
    rule; the friends list (app.services.social) asks it too."""
    return same_owner


def speaks_for_own_agents(rel: Relationship) -> bool:
    """A person in the loop (their virtual-user agent) may reach whoever their own
    agents may reach: it can start, answer and cancel work there without a
    friendship of its own."""
    return rel.owner_agent_may


def can_communicate(rel: Relationship) -> bool:
    if rel.friends or rel.shares_group:
        return True
    return implicitly_friends(same_owner=rel.same_owner) or speaks_for_own_agents(rel)


def is_participant(agent_id: str, initiator: str, serving_agent: str) -> bool:
    return agent_id in (initiator, serving_agent)


def side_of(agent_id: str, initiator: str, serving_agent: str) -> str:
    return "serving" if agent_id == serving_agent else "initiator"
