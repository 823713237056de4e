"""What the policies are configured with: ``mesh agent`` flags, never a message.

A friend's message is untrusted input: it may pick a complexity level (which
changes effort and thinking, not limits) and waive the handshake when
``handshake="auto"``; it cannot switch a guard off or raise a limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Handshake = Literal["auto", "always", "off"]


@dataclass(frozen=True)
class PolicyConfig:
    # Level → effort/thinking of the run (--no-complexity: the configured --effort for all).
    complexity: bool = True
    # auto: medium/high tasks get one unless the sender waived it (handshake=false);
    # always: a waiver is ignored; off: never.
    handshake: Handshake = "auto"
    # The same tool with the same arguments this many times in a row: the call is
    # denied with a warning; once more and the run is stopped.
    loop_limit: int = 10
    # Tool calls in one run before it is stopped.
    max_tool_calls: int = 200
    # A mesh tool failing this many times in a row is not offered again in the run.
    tool_failures: int = 5
    # Failed runs in a row for one context before the runtime stops running for it.
    failed_runs: int = 3
    # Acknowledgement-only messages in a row on a task before the runtime closes it.
    chit_chat: int = 3
    # The workspace's checks (build/test commands) the runtime re-runs to label a reply
    # `independently verified` (--check, repeatable); each at most check_timeout seconds.
    checks: tuple[str, ...] = ()
    # A run started by a group (broadcast) message gets at most these limits: many agents
    # wake up for one message, so each may spend less.
    broadcast_max_turns: int = 20
    broadcast_max_budget_usd: float = 3.0
    # {task}.plan.md for high tasks (told to write it; told where it stopped when resumed).
    plans: bool = True
    # notes/<peer>/*.md (for that peer's events) and CLAUDE.md in the system prompt, reminders to keep them.
    notes: bool = True
    check_timeout: float = 300.0
    # Run the checks without bubblewrap when it is not installed (--unsafe-check).
    unsafe_check: bool = False
