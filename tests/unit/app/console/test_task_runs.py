"""The console pairs a run's messages with its final figures by sender and run id."""

from __future__ import annotations

from app.console.peer_fields import task_runs


def _mid(run_id: str) -> dict:  # type: ignore[type-arg]
    return {"mesh_run": {"run_id": run_id, "final": False, "turns_so_far": 1}}


def _final(run_id: str, cost: float, turns: int) -> dict:  # type: ignore[type-arg]
    return {"mesh_run": {"run_id": run_id, "final": True, "outcome": "ok", "cost_usd": cost, "turns": turns}}


def test_a_mid_run_message_shows_its_runs_final_figures_and_the_run_counts_once() -> None:
    messages = [("human", None), ("a", _mid("r1")), ("a", _mid("r1")), ("a", _final("r1", 0.5, 3))]
    shown, totals = task_runs(messages)
    assert shown[0] is None
    assert [(f.cost_usd, f.turns) for f in shown[1:]] == [(0.5, 3)] * 3  # type: ignore[union-attr]
    assert totals["cost_usd"] == 0.5 and totals["turns"] == 3 and len(totals["runs"]) == 1


def test_a_peer_cannot_set_figures_for_another_senders_run() -> None:
    shown, totals = task_runs([("a", _mid("r1")), ("evil", _final("r1", 999.0, 9))])
    assert shown[0] is not None and not shown[0].final  # a's run reported nothing yet
    assert totals["cost_usd"] == 999.0  # evil's own message counts for evil's run only
    assert len(totals["runs"]) == 2


def test_two_runs_and_legacy_figures_are_summed() -> None:
    legacy = {"mesh_run": {"cost_usd": 0.25, "turns": 2, "outcome": "ok"}}
    _, totals = task_runs([("a", _final("r1", 0.5, 3)), ("a", _final("r2", 0.25, 1)), ("b", legacy)])
    assert totals["cost_usd"] == 1.0 and totals["turns"] == 6 and len(totals["runs"]) == 3
