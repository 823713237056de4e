"""Run reports wait in the state folder until the gateway takes them, in order; a
refused one is dropped, an outage keeps them all; every attempt at an event is a
run of its own, across restarts; a run a killed runtime left open is reported
failed by the next one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from meshd.daemon.run_reports import INTERRUPTED, RunReports, gateway_outcome
from meshd.errors import MeshConnectionError, ValidationError
from meshd.models import InboxEvent

ME = "a@alice"


class Gateway:
    """Stands in for the SDK client's report_run: down, then up, then refusing."""

    def __init__(self, down: bool = True) -> None:
        self.down = down
        self.taken: list[dict[str, Any]] = []
        self.refuse: set[str] = set()

    async def report_run(self, run: dict[str, Any]) -> dict[str, Any]:
        if self.down:
            raise MeshConnectionError("cannot reach the gateway")
        if (run["run_id"], run["outcome"]) in self.refuse:
            raise ValidationError(422, "Unprocessable", "bad report")
        self.taken.append(run)
        return run

    def seen(self) -> list[tuple[str, str]]:
        return [(r["run_id"], r["outcome"]) for r in self.taken]


def event(n: int) -> InboxEvent:
    return InboxEvent(seq=n, event_id=f"e{n}", type="task.created", created_at="2026-12-03T00:00:00Z",
                      payload={}, task_id=f"t{n}")


async def test_reports_survive_an_outage_and_a_restart_in_order(tmp_path: Path) -> None:
    gw = Gateway()
    reports = RunReports(tmp_path, ME)
    ids = []
    for i in range(3):
        ids.append(await reports.start(gw, event(i)))
        await reports.end(gw, ids[-1], "ok", turns=1, cost_usd=0.5)
    assert reports.pending == 6 and reports.waiting.is_set()
    # A new runtime (after a kill) finds them in the folder and sends them first.
    gw.down, gw.refuse = False, {(ids[1], "ok")}
    again = RunReports(tmp_path, ME)
    assert await again.recover(gw) == 0 and again.pending == 0 and not again.waiting.is_set()
    assert gw.seen() == [(ids[0], "running"), (ids[0], "ok"), (ids[1], "running"),
                         (ids[2], "running"), (ids[2], "ok")]  # refused as invalid: dropped
    assert gw.taken[1]["cost_usd"] == 0.5 and gw.taken[1]["task_id"] == "t0"


async def test_every_attempt_is_a_run_of_its_own_and_a_killed_one_is_closed(tmp_path: Path) -> None:
    gw = Gateway(down=False)
    reports = RunReports(tmp_path, ME)
    first = await reports.start(gw, event(1))
    await reports.end(gw, first, "failed", error="boom")
    second = await reports.start(gw, event(1))  # the daemon's retry
    assert second != first
    # Killed mid-run: the next runtime reports the open run failed, and the event's
    # re-run after the restart gets a third id.
    after = RunReports(tmp_path, ME)
    assert await after.recover(gw) == 1
    third = await after.start(gw, event(1))
    assert len({first, second, third}) == 3
    assert gw.seen()[-2:] == [(second, "failed"), (third, "running")]
    assert gw.taken[-2]["error"] == INTERRUPTED and gw.taken[-2]["task_id"] == "t1"
    assert await RunReports(tmp_path, ME).recover(gw) == 1  # the third is still open


def test_outcomes_map_onto_the_gateways_vocabulary() -> None:
    assert gateway_outcome("ok") == ("ok", None)
    assert gateway_outcome("error_max_turns") == ("limit", "turn limit")
    assert gateway_outcome("guard") == ("limit", "runaway guard")
    assert gateway_outcome("error") == ("failed", None)
