"""What a run's model may do besides the mesh tools: by default, files inside its workspace.

Three layers, because a friend's message is untrusted input:

1. ``tools``: only the built-in tools named are offered at all (default: Read,
   Write, Edit, Glob, Grep; no shell, no web). ``disallowed_tools`` removes the
   risky ones even if something else would add them.
2. ``permission_mode="dontAsk"``: whatever is not pre-approved is denied, never
   prompted (nobody is there to answer).
3. A ``PreToolUse`` hook (it sees every call, whatever the permission rules say)
   denies a file tool whose path resolves outside the workspace or the extra
   folders, symlinks included.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger("meshd.agent")

PATH_KEYS = ("file_path", "path", "notebook_path")
FILE_TOOLS = frozenset({"Read", "Write", "Edit", "MultiEdit", "NotebookEdit", "Glob", "Grep", "LS"})

HookFn = Callable[[Any, str | None, Any], Awaitable[dict[str, Any]]]


def inside(path: Path, roots: Sequence[Path]) -> bool:
    real = Path(os.path.realpath(path))
    return any(real == r or r in real.parents for r in roots)


def deny(reason: str) -> dict[str, Any]:
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }
    }


def outside_path(name: str, args: dict[str, Any], roots: Sequence[Path]) -> str | None:
    """The path argument of a file tool call that lies outside ``roots``, if any."""
    keys = PATH_KEYS
    if name == "Glob":
        # A Glob pattern is a path too ("/home/*/.ssh/*", "../**"): check its fixed prefix.
        keys = (*PATH_KEYS, "pattern")
    for key in keys:
        value = args.get(key)
        if not isinstance(value, str) or not value:
            continue
        if key == "pattern":
            value = value.split("*", 1)[0].split("?", 1)[0].split("[", 1)[0] or "."
        # "~" is expanded the way a shell would: the stricter reading.
        value = os.path.expanduser(value)
        target = Path(value) if os.path.isabs(value) else roots[0] / value
        if not inside(target, roots):
            return value
    return None


def path_guard(workspace: Path, extra: Sequence[Path] = (), on_deny: Callable[[str, str], None] | None = None
               ) -> HookFn:  # fmt: skip
    """A PreToolUse hook that keeps file tools inside ``workspace`` (and ``extra``)."""
    roots = [Path(os.path.realpath(p)) for p in (workspace, *extra)]

    async def hook(data: Any, tool_use_id: str | None, context: Any) -> dict[str, Any]:
        name = str(data.get("tool_name", ""))
        args = data.get("tool_input") or {}
        if name not in FILE_TOOLS:
            return {}
        value = outside_path(name, args, roots)
        if value is None:
            return {}
        reason = f"{name} on {value} denied: only files inside {roots[0]} may be used"
        log.warning("permission: %s", reason)
        if on_deny is not None:
            on_deny(name, value)
        return deny(reason)

    return hook
