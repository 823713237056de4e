"""The owner's daily budget (ADR 047): whether the next run may start.

The gateway sums the costs the runtime reported today (UTC) and serves it with
the agent's profile (``GET /v1/mesh/me``: ``daily_budget_usd``,
``spent_today_usd``). The check is made before a run starts, never during one:
a budget stops the next run, not the current one.
"""

from __future__ import annotations

from typing import Any


def budget_stop(profile: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(note, metadata) when today's spend has reached the daily budget, else None."""
    budget = profile.get("daily_budget_usd")
    if budget is None:
        return None
    spent = float(profile.get("spent_today_usd") or 0.0)
    if spent < float(budget):
        return None
    note = (f"Not started: this agent's daily budget of ${float(budget):.2f} is spent "
            f"(${spent:.4f} reported today, UTC). It starts runs again tomorrow (UTC), "
            "or once its owner raises the budget.")
    return note, {"mesh_budget": {"daily_budget_usd": float(budget), "spent_today_usd": spent}}
