"""When a broadcast is settled: the one statement of the rule.

``completed`` counts recipients whose task reached ``completed``; any other
terminal state (failed, canceled, rejected) is an answer that does not count.
A broadcast settles as soon as its outcome is certain:

* ``met`` — at least ``required`` tasks completed;
* ``unmet`` — so many tasks ended otherwise that ``required`` can no longer be
  reached (waiting for the timeout would tell the sender nothing new);
* ``timeout`` — decided by cron when the deadline passes first.
"""

from __future__ import annotations

from typing import Literal

Policy = Literal["all", "any", "n"]
Outcome = Literal["met", "unmet", "timeout"]


def required(policy: Policy, n: int | None, total: int) -> int:
    if policy == "all":
        return total
    if policy == "any":
        return 1
    assert n is not None
    return n


def outcome(required_completions: int, *, completed: int, still_open: int) -> Outcome | None:
    """The outcome once it is certain, else None (keep waiting)."""
    if completed >= required_completions:
        return "met"
    if completed + still_open < required_completions:
        return "unmet"
    return None
