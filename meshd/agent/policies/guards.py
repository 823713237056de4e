"""Runaway guards inside one run, as SDK hooks (enforced by the runtime, not asked of the model).

- loop: the same tool with the same arguments ``loop_limit`` times in a row → that
  call is denied with a warning; one more identical call → the run is stopped;
- tool storm: more than ``max_tool_calls`` tool calls in the run → stopped;
- circuit breaker: a mesh tool failing ``tool_failures`` times in a row is denied
  for the rest of the run (the CLI cannot withdraw an offered tool mid-run; a
  denial says why, so the model stops trying).

A stopped run ends like a limit: not retried, the task gets a note (closing.py).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from claude_agent_sdk import HookMatcher
from claude_agent_sdk.types import HookEvent

from meshd.agent.permissions import deny
from meshd.agent.policies.config import PolicyConfig
from meshd.agent.policies.metrics import PolicyMetrics

log = logging.getLogger("meshd.agent")
MESH_PREFIX = "mcp__mesh__"


def _failed(response: Any) -> bool:
    """Whether an MCP tool's result is an error result (our mesh tools return ``is_error``)."""
    if isinstance(response, dict):
        return bool(response.get("is_error") or response.get("isError"))
    return False


@dataclass
class RunGuards:
    config: PolicyConfig
    metrics: PolicyMetrics
    calls: int = 0
    last: str = ""
    repeats: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    broken: set[str] = field(default_factory=set)
    # Why the run was stopped, when a guard stopped it.
    stopped: str | None = None

    def _stop(self, metric: str, reason: str) -> dict[str, Any]:
        self.stopped = reason
        self.metrics.inc(metric, reason)
        log.warning("guard: %s; stopping the run", reason)
        return {**deny(reason), "continue_": False, "stopReason": reason}

    async def pre(self, data: Any, tool_use_id: str | None, context: Any) -> dict[str, Any]:
        name = str(data.get("tool_name", ""))
        if name == "ToolSearch":  # loading a deferred tool is not work
            return {}
        self.calls += 1
        c = self.config
        if self.calls > c.max_tool_calls:
            return self._stop("guard_tool_storm", f"more than {c.max_tool_calls} tool calls in one run")
        key = name + json.dumps(data.get("tool_input") or {}, sort_keys=True, default=str)
        self.repeats = self.repeats + 1 if key == self.last else 1
        self.last = key
        if self.repeats > c.loop_limit:
            why = f"{name} called {self.repeats} times in a row with the same arguments"
            return self._stop("guard_loop_stopped", why)
        if self.repeats == c.loop_limit:
            self.metrics.inc("guard_loop_warned", name)
            return deny(
                f"Loop guard: you called {name} {self.repeats} times in a row with the same arguments. "
                "It will not give a different answer. Do something else or end the run; one more "
                "identical call stops the run."
            )
        if name in self.broken:
            return deny(f"{name} failed {c.tool_failures} times in a row and is switched off for this run.")
        return {}

    def _result(self, name: str, failed: bool) -> None:
        if not name.startswith(MESH_PREFIX):
            return
        if not failed:
            self.failures[name] = 0
            return
        self.failures[name] += 1
        if self.failures[name] >= self.config.tool_failures and name not in self.broken:
            self.broken.add(name)
            self.metrics.inc("guard_tool_breaker", name)

    async def post(self, data: Any, tool_use_id: str | None, context: Any) -> dict[str, Any]:
        self._result(str(data.get("tool_name", "")), _failed(data.get("tool_response")))
        return {}

    async def post_failure(self, data: Any, tool_use_id: str | None, context: Any) -> dict[str, Any]:
        self._result(str(data.get("tool_name", "")), True)
        return {}

    def hooks(self) -> dict[HookEvent, list[HookMatcher]]:
        return {
            "PreToolUse": [HookMatcher(hooks=[self.pre])],
            "PostToolUse": [HookMatcher(hooks=[self.post])],
            "PostToolUseFailure": [HookMatcher(hooks=[self.post_failure])],
        }
