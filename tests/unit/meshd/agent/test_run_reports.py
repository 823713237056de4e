"""Run reports wait in the state folder until the gateway takes them, in order;
a refused one is dropped, an outage keeps them all."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from meshd.agent.run_reports import RunReports, gateway_outcome
from meshd.errors import MeshConnectionError, ValidationError


class Gateway:
    """Stands in for the SDK client's report_run: down, then up, then refusing."""

    def __init__(self) -> None:
        self.down = True
        self.taken: list[str] = []
        self.refuse: set[str] = set()

    async def report_run(self, run: dict[str, Any]) -> dict[str, Any]:
        if self.down:
            raise MeshConnectionError("cannot reach the gateway")
        if run["run_id"] in self.refuse:
            raise ValidationError(422, "Unprocessable", "bad report")
        self.taken.append(run["run_id"])
        return run


async def test_reports_survive_an_outage_and_a_restart_in_order(tmp_path: Path) -> None:
    gw = Gateway()
    reports = RunReports(tmp_path)
    for i in range(3):
        assert await reports.send(gw, {"run_id": f"r{i}", "outcome": "ok"}) == i + 1
    # A new runtime (after a kill) finds them in the folder and sends them first.
    gw.down, gw.refuse = False, {"r1"}
    again = RunReports(tmp_path)
    assert await again.send(gw, {"run_id": "r3", "outcome": "ok"}) == 0
    assert gw.taken == ["r0", "r2", "r3"]  # r1 refused as invalid: dropped, not retried
    assert await again.send(gw) == 0 and gw.taken == ["r0", "r2", "r3"]


def test_outcomes_map_onto_the_gateways_vocabulary() -> None:
    assert gateway_outcome("ok") == ("ok", None)
    assert gateway_outcome("error_max_turns") == ("limit", "turn limit")
    assert gateway_outcome("guard") == ("limit", "runaway guard")
    assert gateway_outcome("error") == ("failed", None)
