from meshd.agent.budget import budget_stop


def test_no_budget_or_spend_below_it_lets_the_run_start() -> None:
    assert budget_stop({}) is None
    assert budget_stop({"daily_budget_usd": None, "spent_today_usd": 99.0}) is None
    assert budget_stop({"daily_budget_usd": 1.0, "spent_today_usd": 0.9999}) is None


def test_spend_at_or_over_the_budget_stops_it_with_a_note_naming_it() -> None:
    note, meta = budget_stop({"daily_budget_usd": 1.0, "spent_today_usd": 1.0}) or ("", {})
    assert "daily budget of $1.00 is spent" in note and "$1.0000 reported today" in note
    assert meta == {"mesh_budget": {"daily_budget_usd": 1.0, "spent_today_usd": 1.0}}
    # A budget of 0 pauses the agent's runs.
    assert budget_stop({"daily_budget_usd": 0, "spent_today_usd": 0}) is not None
