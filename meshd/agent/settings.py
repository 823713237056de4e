"""What a ``mesh agent`` process is configured with, and the settings of one run.

:class:`AgentSettings` is read once from the command line. :class:`RunSettings`
is what one run gets; a :class:`Policy` chooses it per event. The default policy
hands every event the same limits; policies by task complexity (effort, thinking)
plug in here without touching the runner.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from meshd.agent.policies.config import PolicyConfig
from meshd.models import InboxEvent

# Events that need thought by default. Receipts, own echoes, friend and group
# notices only refresh what the agent knows (its teammates summary). A
# group.message can be added (--run-on); the model answers the group with
# mesh_notify_group. A broadcast.completed is the answer to the agent's own
# mesh_broadcast, so it wakes the agent by default.
DEFAULT_RUN_ON = ("task.created", "task.message", "broadcast.completed")
# Built-in Claude Code tools offered by default: files, inside the workspace only.
DEFAULT_TOOLS = ("Read", "Write", "Edit", "Glob", "Grep")
# Never offered unless named with --allow-tool: a shell runs anything, anywhere,
# and the web tools can carry the workspace out.
RISKY_TOOLS = ("Bash", "BashOutput", "KillShell", "WebFetch", "WebSearch", "NotebookEdit", "Agent", "Task")

Effort = Literal["low", "medium", "high", "xhigh", "max"]
# Tries of a run that failed with an error (a limit is never retried): fewer than
# `mesh daemon`'s, since a failed run may have spent money. `mesh agent --attempts`.
AGENT_ATTEMPTS = 2


@dataclass(frozen=True)
class RunSettings:
    """Limits and model settings of one run (one inbox event)."""

    max_turns: int = 30
    max_budget_usd: float = 5.0
    timeout: float = 900.0
    model: str | None = None
    effort: Effort | None = None
    # e.g. {"type": "adaptive"} or {"type": "disabled"}; passed to the SDK as is.
    thinking: dict[str, object] | None = None


@dataclass
class AgentSettings:
    state_dir: Path | None = None
    workspace: Path | None = None
    run: RunSettings = field(default_factory=RunSettings)
    run_on: frozenset[str] = frozenset(DEFAULT_RUN_ON)
    auto_reply: bool = True
    # A served task the run answered and left open is completed when the run ends.
    auto_complete: bool = True
    tools: tuple[str, ...] = DEFAULT_TOOLS
    # Paths outside the workspace the file tools may still touch (--add-dir).
    extra_dirs: tuple[Path, ...] = ()
    # How many earlier messages of the task the wake-up prompt shows (newest kept).
    history: int = 20
    history_chars: int = 12_000
    # The teammates summary is rebuilt at most this often (and at once after a
    # friend or group event).
    teammates_ttl: float = 300.0
    cli_path: str | None = None
    policies: PolicyConfig = field(default_factory=PolicyConfig)


Policy = Callable[[InboxEvent, AgentSettings], RunSettings]


def default_policy(event: InboxEvent, settings: AgentSettings) -> RunSettings:
    """Every event gets the configured limits; a task may ask for less, never more."""
    meta = (event.message.metadata if event.message else None) or {}
    asked = meta.get("max_turns") if isinstance(meta, dict) else None
    if isinstance(asked, int) and 0 < asked < settings.run.max_turns:
        return replace(settings.run, max_turns=asked)
    return settings.run
