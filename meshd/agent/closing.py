"""What a run leaves behind once the model has stopped: the answer and the task
states on the mesh, a note on the task when a limit cut the run short or the daily
budget left it no run, and the run's line in the local run log.

What a run posts here carries its final figures (cost, turns, duration), which
the messages posted mid-run could not know (ADR 037). The messages have ids
derived from the event, so a run repeated after a crash posts none of them twice.
"""

from __future__ import annotations

import logging
from typing import Any

from meshd import tracing
from meshd.agent.outcome import Outcome
from meshd.agent.policies.chitchat import is_chit_chat
from meshd.agent.policies.engine import Plan
from meshd.agent.policies.metrics import PolicyMetrics
from meshd.agent.sessions import RunLog, RunRecord
from meshd.agent.settings import AgentSettings, RunSettings
from meshd.agent.tools import NEEDS_WORKING, RunContext, note_part
from meshd.client import MeshClient
from meshd.daemon.retries import set_failed
from meshd.errors import ConflictError, MeshError
from meshd.ids import derived_message_id
from meshd.models import InboxEvent, Task

log = logging.getLogger("meshd.agent")


class RunClosing:
    """The end of each run of one agent (``me``), for :class:`meshd.agent.runner.AgentRunner`.
    ``runtime`` names the SDK and its version: handed in, as only the runner imports the SDK."""

    def __init__(self, settings: AgentSettings, me: str, runtime: str, runs: RunLog,
                 metrics: PolicyMetrics) -> None:  # fmt: skip
        self.settings = settings
        self.me = me
        self.runtime = runtime
        self.runs = runs
        self.metrics = metrics

    def _final_metadata(self, event: InboxEvent, outcome: Outcome, run: RunContext, **extra: Any
                        ) -> dict[str, Any]:  # fmt: skip
        return {
            "mesh_run": {
                "runtime": self.runtime,
                "run_id": run.run_id,
                "event_id": event.event_id,
                "final": True,
                "outcome": outcome.kind,
                "cost_usd": round(outcome.cost_usd, 6),
                "turns": outcome.turns,
                "duration_ms": outcome.duration_ms,
                **extra,
            },
            **run.extra,
        }

    async def auto_reply(
        self, event: InboxEvent, task: Task | None, run: RunContext, outcome: Outcome
    ) -> bool:
        # Only on a task someone asked of us: an initiator's runtime that answered
        # every reply automatically would chat with the other runtime forever.
        if not self.settings.auto_reply or run.posted or not outcome.text or task is None:
            return False
        if task.serving_agent != self.me or event.type not in ("task.created", "task.message"):
            return False
        if is_chit_chat(outcome.text):
            # "You're welcome!" is not an answer anyone waits for: posting it starts a ping-pong.
            self.metrics.inc("guard_chit_chat_reply_dropped", task.task_id)
            return False
        text, label = outcome.text, {}
        if run.finish_reply is not None:
            text, label = await run.finish_reply(text)
        try:
            await run.client.reply(
                task.task_id,
                text,
                message_id=run.message_id(f"{event.event_id}/auto-reply"),
                metadata={**self._final_metadata(event, outcome, run, auto_reply=True), **label},
            )
        except ConflictError as e:
            log.warning("auto-reply on task %s not stored: %s", task.task_id, e)
            return False
        return True

    async def close(self, event: InboxEvent, task: Task | None, run: RunContext, outcome: Outcome,
                     auto: bool, plan: Plan) -> None:  # fmt: skip
        """After a run that ended normally: apply the state changes the model asked for and,
        on the task it serves and answered without setting a state, complete it. Each change
        carries the run's final figures, which mid-run messages could not know (ADR 037)."""
        figures = self._final_metadata(event, outcome, run)
        for task_id, (state, note) in run.held.items():
            await self._apply(run, task_id, state, note, figures)
        if task is None or task.serving_agent != self.me or task.task_id in run.held:
            return
        if event.type not in ("task.created", "task.message"):
            return
        answered = auto or task.task_id in run.posted_on
        if run.waiting:
            # It asked others and waits for their answers: not done, but being worked on.
            await self._apply(run, task.task_id, "working", None, figures, only_from="submitted")
        elif answered and self.settings.auto_complete and not plan.handshake:
            await self._apply(run, task.task_id, "completed", None, figures)

    async def _apply(self, run: RunContext, task_id: str, state: str, note: str | None,
                     figures: dict[str, Any], only_from: str | None = None) -> None:  # fmt: skip
        client = run.client
        meta = figures
        if note is None:
            # The runtime's own words, not the model's: marked so a reader can tell.
            meta = {**figures, "mesh_run": {**figures["mesh_run"], "closing": True}}
        fig = figures["mesh_run"]
        text = note or f"Run finished: {fig['turns']} turns, ${fig['cost_usd']:.4f}."
        try:
            now = await client.get_task(task_id)
            if now.terminal or (only_from is not None and now.state != only_from):
                return
            if state in NEEDS_WORKING and now.state in ("submitted", "input-required"):
                await client.set_status(task_id, "working")
            await client.set_status(task_id, state, text, metadata=meta,
                                    message_id=run.message_id(f"{run.event.event_id}/close/{task_id}"))
            log.info("task %s set to %s after the run", task_id, state)
        except MeshError as e:
            log.warning("could not set task %s to %s after the run: %s", task_id, state, e)

    async def limit_note(
        self, event: InboxEvent, rs: RunSettings, run: RunContext, outcome: Outcome
    ) -> None:
        limit = {
            "error_max_turns": f"turn limit (--max-turns {rs.max_turns})",
            "error_max_budget_usd": f"budget limit (--max-budget-usd {rs.max_budget_usd:g})",
            "timeout": f"time limit (--timeout {rs.timeout:g} s)",
            "guard": f"runaway guard ({outcome.detail})",
        }[outcome.kind]
        spent = (
            f"${outcome.cost_usd:.4f} spent"
            if outcome.session_cost is not None
            else "spend not reported (the run was cut off before the model API's usage was totalled)"
        )
        note = (
            f"Stopped: the agent run for this message hit its {limit} after {outcome.turns} turns, "
            f"{spent} in {outcome.duration_ms / 1000:.1f} s. It is not retried."
        )
        log.warning("run for seq %d: %s", event.seq, note)
        meta = self._final_metadata(event, outcome, run, limit=limit)
        await self._stopped_note(event, run.client, note, meta, f"{event.event_id}/limit", limit)

    async def budget_note(self, event: InboxEvent, client: MeshClient, note: str,
                           meta: dict[str, Any]) -> None:
        log.warning("seq %d (%s, task %s): no run: %s", event.seq, event.type, event.task_id, note)
        await self._stopped_note(event, client, note, meta, f"{event.event_id}/budget",
                                 "daily budget")

    async def _stopped_note(self, event: InboxEvent, client: MeshClient, note: str,
                            meta: dict[str, Any], key: str, why: str) -> None:
        """Tell the task why its message got no (full) run: the task fails when this
        agent serves it, else the note is a reply. Once per event (``key``)."""
        if not event.task_id:
            return
        parts = [note_part(note, meta)]
        mid = derived_message_id(self.me, key)
        try:
            task = await client.get_task(event.task_id)
            if task.terminal:
                return
            if task.serving_agent == self.me:
                await set_failed(client, task, parts=parts, message_id=mid, metadata=meta)
                log.info("task %s set to failed (%s)", task.task_id, why)
            else:
                await client.reply(task.task_id, parts=parts, message_id=mid, metadata=meta)
        except MeshError as e:
            log.warning("could not report the %s on task %s: %s", why, event.task_id, e)

    def record(
        self, event: InboxEvent, run: RunContext, outcome: Outcome, auto: bool, detail: str = ""
    ) -> None:
        rec = RunRecord(
            event_id=event.event_id, seq=event.seq, event_type=event.type, task_id=event.task_id,
            context_id=event.context_id, outcome=outcome.kind, cost_usd=round(outcome.cost_usd, 6),
            turns=outcome.turns, duration_ms=outcome.duration_ms, session_id=outcome.session_id,
            posted=run.posted + int(auto), auto_reply=auto, detail=detail[:500],
        )  # fmt: skip
        totals = self.runs.add(rec)
        tracing.annotate({"mesh.run.id": run.run_id, "mesh.run.outcome": outcome.kind,
                          "mesh.run.turns": outcome.turns, "mesh.run.cost_usd": rec.cost_usd,
                          "mesh.run.duration_ms": outcome.duration_ms})
        log.info(
            "run for seq %d done: outcome=%s turns=%d cost_usd=%.6f duration_ms=%d posted=%d "
            "auto_reply=%s (total: %d runs, $%.4f)",
            event.seq, outcome.kind, outcome.turns, outcome.cost_usd, outcome.duration_ms,
            rec.posted, auto, totals.get("runs", 0), totals.get("cost_usd", 0.0),
        )  # fmt: skip
