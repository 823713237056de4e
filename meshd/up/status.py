"""What ``mesh status FILE`` shows per agent, from the files in each agent's state folder.

``up-status.json`` is written by the supervisor (state, pid, restarts, last error);
``state.json`` by the daemon (cursor, the ids of the last handled events);
``runs.jsonl`` by ``mesh agent`` (one line per run, with its cost). Nothing here
talks to the gateway: the listing works while it is down, and for any user who
can read the folders.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from meshd.files import atomic_write_json
from meshd.up.spec import Agent

STATUS_FILE = "up-status.json"
# States the supervisor writes; "down" is derived here when its process is gone.
LIVE_STATES = frozenset({"starting", "running", "restarting", "stopping"})


@dataclass
class AgentStatus:
    """The supervisor's record of one agent, replaced atomically on every change."""

    id: str
    kind: str
    state: str = "starting"
    pid: int | None = None
    supervisor_pid: int = field(default_factory=os.getpid)
    started_at: float | None = None
    restarts: int = 0
    last_exit: int | None = None
    last_error: str | None = None
    next_start_at: float | None = None
    updated_at: float = field(default_factory=time.time)

    def save(self, folder: Path) -> None:
        self.updated_at = time.time()
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write_json(folder / STATUS_FILE, asdict(self))


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _today(runs: Path, now: float) -> tuple[int, float, dict[str, Any] | None]:
    """Runs and dollars since local midnight, and the last run, from ``runs.jsonl``."""
    midnight = datetime.fromtimestamp(now).replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
    count, cost, last = 0, 0.0, None
    try:
        with runs.open() as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a crash
                if not isinstance(rec, dict):
                    continue
                last = rec
                if float(rec.get("at") or 0) >= midnight:
                    count += 1
                    cost += float(rec.get("cost_usd") or 0.0)
    except OSError:
        pass
    return count, round(cost, 6), last


def agent_status(agent: Agent, *, now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    sup = _read_json(agent.state_dir / STATUS_FILE)
    daemon = _read_json(agent.state_dir / "state.json")
    state = sup.get("state") or "not started"
    if state in LIVE_STATES and not _alive(sup.get("supervisor_pid")):
        state = "down"  # the supervisor died without writing "stopped"
    handled = daemon.get("handled") or []
    row: dict[str, Any] = {
        "id": agent.id,
        "kind": agent.kind,
        "state": state,
        "pid": sup.get("pid") if state in LIVE_STATES else None,
        "restarts": sup.get("restarts", 0),
        "cursor": daemon.get("cursor"),
        "last_event_id": handled[-1] if handled else None,
        "last_event_at": None,
        "last_error": sup.get("last_error"),
        "last_exit": sup.get("last_exit"),
        "runs_today": None,
        "cost_today_usd": None,
        "state_dir": str(agent.state_dir),
    }
    if agent.kind == "agent":
        count, cost, last = _today(agent.state_dir / "runs.jsonl", now)
        row["runs_today"], row["cost_today_usd"] = count, cost
        if last and last.get("event_id") == row["last_event_id"]:
            row["last_event_at"] = last.get("at")
    return row


def _ago(ts: Any, now: float) -> str:
    if not isinstance(ts, int | float):
        return ""
    s = max(0, int(now - ts))
    return f"{s}s ago" if s < 120 else f"{s // 60}m ago" if s < 7200 else f"{s // 3600}h ago"


def status_rows(rows: list[dict[str, Any]], *, now: float | None = None) -> list[list[str]]:
    """The human table: a header and one line per agent."""
    now = time.time() if now is None else now
    out = [
        ["AGENT", "KIND", "STATE", "PID", "RESTARTS", "CURSOR", "LAST EVENT", "RUNS/COST TODAY", "LAST ERROR"]
    ]
    for r in rows:
        last = r["last_event_id"] or ""
        if r["last_event_at"]:
            last += f" ({_ago(r['last_event_at'], now)})"
        today = "" if r["runs_today"] is None else f"{r['runs_today']} / ${r['cost_today_usd']:.2f}"
        err = " ".join((r["last_error"] or "").split())
        out.append([
            r["id"], r["kind"], r["state"], str(r["pid"] or ""), str(r["restarts"]),
            "" if r["cursor"] is None else str(r["cursor"]), last, today, err[:100],
        ])  # fmt: skip
    return out
