"""The policies put together: what one event's run gets, and what happens after it.

The runner asks :meth:`Policies.plan` before a run (may say *skip*: chit-chat, an
open circuit breaker) and reports the outcome with :meth:`Policies.finished`.
Everything here is decided by the runtime from the event, the task and the
``mesh agent`` configuration; the model's words decide nothing.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from claude_agent_sdk import HookMatcher
from claude_agent_sdk.types import HookEvent

from meshd.agent.policies import complexity, handshake, labels, notes, plans
from meshd.agent.policies.chitchat import message_is_chit_chat, trailing_chit_chat
from meshd.agent.policies.config import PolicyConfig
from meshd.agent.policies.guards import RunGuards
from meshd.agent.policies.labels import Verifier
from meshd.agent.policies.metrics import PolicyMetrics
from meshd.agent.policies.sandbox import Sandbox
from meshd.agent.sessions import peer_of
from meshd.agent.settings import RunSettings
from meshd.models import InboxEvent, Task

log = logging.getLogger("meshd.agent")


@dataclass
class Plan:
    """What the policies decided for one event."""

    skip: str | None = None  # why no run starts (then nothing else applies)
    close: bool = False  # chit-chat limit reached on a task we serve: complete it
    breaker_opened: bool = False  # tell the owner (once) that runs stopped for this context
    broadcast: bool = False
    level: complexity.Level = "low"
    level_source: str = "inferred"
    handshake: bool = False
    notes: list[str] = field(default_factory=list)  # added to the wake-up prompt
    guards: RunGuards | None = None
    verifier: Verifier | None = None
    notes_hooks: dict[HookEvent, list[HookMatcher]] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)  # merged into every message's metadata

    def settings(self, rs: RunSettings, config: PolicyConfig) -> RunSettings:
        if self.broadcast:
            rs = replace(rs, max_turns=min(rs.max_turns, config.broadcast_max_turns),
                         max_budget_usd=min(rs.max_budget_usd, config.broadcast_max_budget_usd))  # fmt: skip
        return complexity.apply(rs, self.level) if config.complexity else rs

    def hooks(self, metrics: PolicyMetrics) -> dict[HookEvent, list[HookMatcher]]:
        out: dict[HookEvent, list[HookMatcher]] = {}
        if self.handshake:
            out.update(handshake.read_only(metrics))
        sources = [self.notes_hooks, *(s.hooks() for s in (self.guards, self.verifier) if s is not None)]
        for source in sources:
            for name, matchers in source.items():
                out.setdefault(name, []).extend(matchers)
        return out


class Policies:
    def __init__(self, config: PolicyConfig, folder: Path | None = None, workspace: Path = Path("."),
                 sandbox: Sandbox | None = None) -> None:  # fmt: skip
        self.config = config
        self.workspace = workspace
        self.sandbox = sandbox
        self.metrics = PolicyMetrics(folder)
        # Failed runs in a row per context (in memory: a restart gives a context another chance).
        self.failures: Counter[str] = Counter()

    def plan(self, event: InboxEvent, task: Task | None, me: str, context_key: str) -> Plan:
        c = self.config
        if self.failures[context_key] >= c.failed_runs:
            self.metrics.inc("guard_breaker_skipped", context_key)
            return Plan(skip=f"circuit breaker open: {self.failures[context_key]} failed runs in a row")
        msg = event.message
        answering = task is not None and handshake.confirms(event, task, me)
        # An answer to our own question is never chit-chat ("OK" confirms a handshake).
        if msg is not None and not answering and event.type == "task.message" and message_is_chit_chat(msg):
            row = trailing_chit_chat(task.messages) if task is not None else 1
            self.metrics.inc("guard_chit_chat", f"{row} in a row")
            close = task is not None and task.serving_agent == me and not task.terminal and row >= c.chit_chat
            return Plan(skip=f"chit-chat ({row} in a row): nothing to answer", close=close)
        level, source = complexity.level_of(event, task)
        plan = Plan(level=level, level_source=source, guards=RunGuards(c, self.metrics),
                    broadcast=event.type == "group.message" or bool(event.payload.get("group_id")),
                    verifier=Verifier(c.checks, self.sandbox, self.metrics, c.check_timeout))  # fmt: skip
        plan.metadata = {"mesh_policy": {"complexity": level}}
        self.metrics.inc(f"complexity_{level}", source)
        sender = event.from_agent_id or "the sender"
        if task is not None and handshake.needed(event, task, me, level, c):
            plan.handshake = True
            plan.notes.append(handshake.prompt(level, task, sender))
            plan.metadata["mesh_policy"]["handshake"] = handshake.MARK
            self.metrics.inc("handshake_requested", task.task_id)
        elif answering:
            plan.notes.append(handshake.confirmed_note(sender))
            self.metrics.inc("handshake_confirmed", task.task_id if task else "")
        if task is not None and task.serving_agent != me and handshake.is_handshake(event):
            plan.notes.append(handshake.sender_note(task))
            self.metrics.inc("handshake_answered", task.task_id)
        serving = task is not None and task.serving_agent == me
        if c.plans and level == "high" and not plan.handshake and serving and task is not None:
            resume = plans.resume_note(self.workspace, task.task_id)
            if resume:
                self.metrics.inc("plan_resumed", task.task_id)
            plan.notes.append(resume or plans.write_note(self.workspace, task.task_id))
        label = labels.reported(msg)
        if label is not None and task is not None and task.serving_agent != me:
            # The other side's runtime wrote it: shown as its claim, with what it says it ran.
            plan.notes.append(f"{sender}'s runtime labelled this reply: {label}.")
        if c.notes:
            peer = peer_of(event)
            notes.ensure(self.workspace, peer)
            plan.notes.append(notes.reminder(self.workspace, peer))
            plan.notes_hooks = notes.hooks(self.workspace, peer)
        return plan

    def finished(self, context_key: str, ok: bool) -> bool:
        """Count a run's outcome; True when this failure opened the context's breaker."""
        if ok:
            self.failures.pop(context_key, None)
            return False
        self.failures[context_key] += 1
        if self.failures[context_key] == self.config.failed_runs:
            self.metrics.inc("guard_breaker_opened", context_key)
            return True
        return False
