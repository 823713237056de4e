"""Reporting each run to the gateway (``POST /v1/mesh/runs``), so the owner sees
its cost and outcome wherever the runtime runs.

A report is kept in the state folder (``run-reports.json``) until the gateway
accepted it: a gateway outage, or the runtime being killed, loses none; the next
report (or the next start) sends what is waiting first, in order. The gateway is
idempotent on ``run_id``, so a report sent twice is stored once. A report the
gateway refuses as invalid (4xx) is dropped with a warning: retrying it cannot help.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

from meshd.errors import (
    AuthError,
    MeshConnectionError,
    MeshError,
    MeshHTTPError,
    RateLimitedError,
    ServerError,
)
from meshd.files import atomic_write_json

log = logging.getLogger("meshd.agent.runs")

# The runtime's outcome kinds (runner.Outcome.kind) as the gateway's vocabulary.
LIMIT_NAMES = {"error_max_turns": "turn limit", "error_max_budget_usd": "budget limit",
               "timeout": "time limit", "guard": "runaway guard"}


def gateway_outcome(kind: str) -> tuple[str, str | None]:
    """(outcome, limit_hit) for the gateway from a run's kind."""
    if kind == "ok":
        return "ok", None
    if kind in LIMIT_NAMES:
        return "limit", LIMIT_NAMES[kind]
    return "failed", None


class RunReports:
    def __init__(self, folder: Path) -> None:
        self.path = folder / "run-reports.json"
        self._lock = asyncio.Lock()

    def _pending(self) -> list[dict[str, Any]]:
        try:
            data = json.loads(self.path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return []
        return data if isinstance(data, list) else []

    async def send(self, client: Any, report: dict[str, Any] | None = None) -> int:
        """Queue ``report`` (if any) and send every waiting one; returns how many
        are still waiting. Never raises: a run must not fail for its report."""
        async with self._lock:
            pending = self._pending()
            if report is not None:
                pending.append(report)
                atomic_write_json(self.path, pending)
            while pending:
                try:
                    await client.report_run(pending[0])
                except (MeshConnectionError, ServerError, RateLimitedError, AuthError) as e:
                    log.info("run report kept for later (%d waiting): %s", len(pending), e)
                    break
                except MeshHTTPError as e:
                    log.warning("the gateway refused a run report (%s); dropped: %s", e, pending[0])
                except MeshError as e:
                    log.info("run report kept for later (%d waiting): %s", len(pending), e)
                    break
                pending.pop(0)
                atomic_write_json(self.path, pending)
            return len(pending)
