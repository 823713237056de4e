"""Reporting each run of a handler to the gateway (``POST /v1/mesh/runs``), so the
owner sees its outcome and cost wherever the runtime runs.

One run is one attempt at an event: ``mesh agent``'s model run or one execution
of a ``mesh daemon --exec`` command. Its ``run_id`` is derived from the event and
the attempt's number, which is counted in the state folder across restarts, so a
retry after a failed attempt and the re-run after a ``kill -9`` are runs of their
own at the gateway (which is idempotent on ``run_id``: a report sent twice is
stored once).

Everything lives in one file of the state folder (``run-reports.json``), written
atomically before anything is sent:

- ``pending``: reports the gateway has not accepted yet, sent in order; a gateway
  outage keeps them all, the daemon's flush loop retries with backoff;
- ``open``: runs that started and have not ended; a runtime that starts finds the
  ones its predecessor left behind (it was killed or crashed) and reports them
  ``failed`` (the event is not acked, so it runs again, as a new run);
- ``attempts``: how many runs each recent event has had.

A report the gateway refuses as invalid (4xx) is dropped with a warning: sending
it again cannot help.
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
from meshd.ids import derived_message_id
from meshd.models import InboxEvent

log = logging.getLogger("meshd.runs")

# The runtime's outcome kinds as the gateway's vocabulary (running, ok, limit, failed).
LIMIT_NAMES = {"error_max_turns": "turn limit", "error_max_budget_usd": "budget limit",
               "timeout": "time limit", "guard": "runaway guard"}
INTERRUPTED = "the runtime stopped during this run (killed or crashed); the event runs again"
CANCELLED = "the runtime was stopped during this run; the event runs again on its next start"
# Attempt counts kept per event: far more than the events a runtime has in flight.
ATTEMPTS_KEPT = 1000


def gateway_outcome(kind: str) -> tuple[str, str | None]:
    """(outcome, limit_hit) for the gateway from a run's kind."""
    if kind == "ok":
        return "ok", None
    if kind in LIMIT_NAMES:
        return "limit", LIMIT_NAMES[kind]
    return "failed", None


class RunReports:
    """The runs of one agent's runtime and their reports, kept in ``folder``."""

    def __init__(self, folder: Path, agent_id: str) -> None:
        self.path = folder / "run-reports.json"
        self.agent_id = agent_id
        self._lock = asyncio.Lock()
        self.waiting = asyncio.Event()  # set while reports are pending (the flush loop waits on it)
        data = self._load()
        self._pending: list[dict[str, Any]] = data["pending"]
        self._open: dict[str, dict[str, Any]] = data["open"]
        self._attempts: dict[str, int] = data["attempts"]
        if self._pending:
            self.waiting.set()

    def _load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            data = {}
        if isinstance(data, list):  # the earlier form: the pending reports alone
            data = {"pending": data}
        if not isinstance(data, dict):
            data = {}
        return {"pending": [r for r in data.get("pending", []) if isinstance(r, dict)],
                "open": dict(data.get("open") or {}),
                "attempts": {str(k): int(v) for k, v in (data.get("attempts") or {}).items()}}

    def _save(self) -> None:
        atomic_write_json(self.path, {"pending": self._pending, "open": self._open,
                                      "attempts": self._attempts})

    @property
    def pending(self) -> int:
        return len(self._pending)

    def _queue(self, report: dict[str, Any]) -> None:
        self._pending.append({k: v for k, v in report.items() if v is not None})
        self.waiting.set()

    async def start(self, client: Any, event: InboxEvent, *, model: str | None = None) -> str:
        """A run of ``event`` begins: its run_id, reported as ``running``."""
        n = self._attempts.pop(event.event_id, 0) + 1
        self._attempts[event.event_id] = n  # re-inserted: the newest stays
        while len(self._attempts) > ATTEMPTS_KEPT:
            self._attempts.pop(next(iter(self._attempts)))
        run_id = derived_message_id(self.agent_id, f"{event.event_id}/run/{n}")
        report = {"run_id": run_id, "event_id": event.event_id, "task_id": event.task_id,
                  "context_id": event.context_id, "model": model}
        self._open[run_id] = report
        self._queue({**report, "outcome": "running"})
        self._save()
        await self.send(client)
        return run_id

    async def end(self, client: Any, run_id: str, outcome: str, **figures: Any) -> None:
        """The run ended with ``outcome`` (ok, limit, failed) and ``figures`` (turns,
        cost_usd, duration_ms, limit_hit, exit_status, error)."""
        self.stopped(run_id, outcome, **figures)
        await self.send(client)

    def stopped(self, run_id: str, outcome: str, **figures: Any) -> None:
        """Record the run's end without sending it: for a run cancelled while the
        runtime shuts down (the report goes out from the next start)."""
        opened = self._open.pop(run_id, None) or {"run_id": run_id}
        self._queue({**opened, **figures, "outcome": outcome})
        self._save()

    async def recover(self, client: Any) -> int:
        """Report the runs a killed or crashed predecessor left open as failed;
        returns how many there were."""
        left = list(self._open.values())
        for run in left:
            # How long it ran before the stop is not known: no duration.
            self._queue({**run, "outcome": "failed", "error": INTERRUPTED})
        self._open.clear()
        if left:
            self._save()
        if left:
            log.warning("%d run(s) were cut short by the last stop; reported as failed", len(left))
        await self.send(client)
        return len(left)

    async def send(self, client: Any) -> int:
        """Send every waiting report, oldest first; returns how many still wait.
        Never raises: a run must not fail for its report. The lock keeps one sender
        at a time; queueing needs none (nothing in it awaits)."""
        async with self._lock:
            while self._pending:
                try:
                    await client.report_run(self._pending[0])
                except (MeshConnectionError, ServerError, RateLimitedError, AuthError) as e:
                    log.info("run report kept for later (%d waiting): %s", len(self._pending), e)
                    break
                except MeshHTTPError as e:
                    log.warning("the gateway refused a run report (%s); dropped: %s", e,
                                self._pending[0])
                except MeshError as e:
                    log.info("run report kept for later (%d waiting): %s", len(self._pending), e)
                    break
                self._pending.pop(0)
                self._save()
            if not self._pending:
                self.waiting.clear()
            return len(self._pending)
