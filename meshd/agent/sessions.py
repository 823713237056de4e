"""Per-conversation SDK sessions and the record of what runs cost, in the agent's state folder.

``sessions.json`` maps a conversation — a task context (``context_id``) *and* the
peer, the other agent of the event (:func:`conversation_key`) — to the SDK session
that holds it. A task a run opened (``mesh_send_message``: a delegation) is
remembered with that run's key (``opened``), so the answer on it continues the
conversation it was opened for, not a new one of the answering peer; the
failed-runs breaker still counts that peer's runs apart. Every run *forks* the context's session (``resume`` +
``fork_session``) and the mapping moves to the fork only once the run has
finished, so a run killed half-way leaves the conversation as it was before the
event, and its re-run starts from there instead of from a half-told story.

``runs.jsonl`` gets one line per run (cost, turns, duration, outcome) and
``agent-stats.json`` the running totals: the figures an owner reads to see what an
agent costs. Both JSON files are replaced atomically (:func:`meshd.files.atomic_write_json`);
``runs.jsonl`` is appended to.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from meshd.files import atomic_write_json
from meshd.models import InboxEvent

MAX_SESSIONS = 5000


def conversation_key(event: InboxEvent) -> str:
    """What a session and the failed-runs breaker belong to: the event's context and its peer.

    Context ids are chosen by whoever writes first, so a friend may name another's. Keyed
    by the peer too, its events neither resume the other peer's session (and read what was
    said there) nor count towards that conversation's breaker (docs/decisions/031-peer-isolation.md).
    """
    context = event.context_id or event.task_id or f"event:{event.event_id}"
    return f"{context} with {peer_of(event)}"


def peer_of(event: InboxEvent) -> str:
    """The other agent of an event (its sender; '-' for the gateway's own notices)."""
    return event.from_agent_id or "-"


@dataclass
class SessionEntry:
    session_id: str
    # The CLI reports a resumed session's cost as the total since the session began,
    # so the cost of one run is the difference to what was recorded here before it.
    cost_usd: float = 0.0
    runs: int = 0
    updated_at: float = 0.0


class SessionStore:
    def __init__(self, folder: Path) -> None:
        self.path = folder / "sessions.json"
        self._items: dict[str, SessionEntry] = {}
        # Task id → the session key of the run that opened it (a delegation): the answer on
        # that task continues that conversation. Written by this runtime only, never by a message.
        self._opened: dict[str, str] = {}
        self._loaded = False

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return
        opened = raw.get("opened")
        if isinstance(opened, dict):
            self._opened = {k: v for k, v in opened.items() if isinstance(v, str)}
        for key, value in (raw.get("sessions") or {}).items():
            if isinstance(value, dict) and isinstance(value.get("session_id"), str):
                self._items[key] = SessionEntry(
                    session_id=value["session_id"],
                    cost_usd=float(value.get("cost_usd") or 0.0),
                    runs=int(value.get("runs") or 0),
                    updated_at=float(value.get("updated_at") or 0.0),
                )

    def key_for(self, event: InboxEvent) -> str:
        """The session an event continues: the delegating conversation's for an answer on a task
        a run of ours opened, else the event's own context and peer."""
        self._load()
        return (event.task_id and self._opened.get(event.task_id)) or conversation_key(event)

    def opened(self, task_ids: list[str], key: str) -> None:
        self._load()
        if not task_ids:
            return
        for task_id in task_ids:
            self._opened[task_id] = key
        while len(self._opened) > MAX_SESSIONS:  # oldest first: dicts keep insertion order
            del self._opened[next(iter(self._opened))]
        self._save()

    def get(self, context: str) -> SessionEntry | None:
        self._load()
        return self._items.get(context)

    def put(self, context: str, session_id: str, cost_usd: float) -> None:
        self._load()
        before = self._items.get(context)
        self._items[context] = SessionEntry(
            session_id=session_id,
            cost_usd=cost_usd,
            runs=(before.runs if before else 0) + 1,
            updated_at=time.time(),
        )
        if len(self._items) > MAX_SESSIONS:
            # The oldest conversations are forgotten first; their transcripts stay on disk.
            for key, _ in sorted(self._items.items(), key=lambda kv: kv[1].updated_at)[
                : len(self._items) - MAX_SESSIONS
            ]:
                del self._items[key]
        self._save()

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.path, {"sessions": {k: asdict(v) for k, v in self._items.items()},
                                      "opened": self._opened})  # fmt: skip


@dataclass
class RunRecord:
    event_id: str
    seq: int
    event_type: str
    task_id: str | None
    context_id: str | None
    outcome: str  # "ok", "error_max_turns", "error_max_budget_usd", "timeout", "error"
    cost_usd: float
    turns: int
    duration_ms: int
    session_id: str | None = None
    posted: int = 0
    auto_reply: bool = False
    detail: str = ""
    at: float = field(default_factory=time.time)


class RunLog:
    def __init__(self, folder: Path) -> None:
        self.runs_path = folder / "runs.jsonl"
        self.stats_path = folder / "agent-stats.json"

    def totals(self) -> dict[str, Any]:
        try:
            data = json.loads(self.stats_path.read_text())
            return data if isinstance(data, dict) else {}
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def add(self, record: RunRecord) -> dict[str, Any]:
        self.runs_path.parent.mkdir(parents=True, exist_ok=True)
        with self.runs_path.open("a") as f:
            f.write(json.dumps(asdict(record), separators=(",", ":")) + "\n")
        totals = self.totals()
        totals["runs"] = int(totals.get("runs", 0)) + 1
        totals["cost_usd"] = round(float(totals.get("cost_usd", 0.0)) + record.cost_usd, 6)
        totals["turns"] = int(totals.get("turns", 0)) + record.turns
        totals["duration_ms"] = int(totals.get("duration_ms", 0)) + record.duration_ms
        outcomes = totals.setdefault("outcomes", {})
        outcomes[record.outcome] = int(outcomes.get(record.outcome, 0)) + 1
        atomic_write_json(self.stats_path, totals)
        return totals
