"""Notes kept in the workspace and fed back into the system prompt (bounded).

``notes/learnings.md``, ``notes/decisions.md`` and ``notes/issues.md`` are created
empty on the first run; their contents, and a ``CLAUDE.md`` at the workspace's
top, go into every run's system prompt, each cut to :data:`MAX_FILE` characters
and all together to :data:`MAX_TOTAL` (newest text kept: notes grow at the end).
The CLI loads no project settings (``setting_sources=[]``, ADR 011), so
``CLAUDE.md`` is read here, as text only. The wake-up prompt reminds the model to
record what it learned; a PreCompact hook reminds it again before the SDK compacts
a long session (both are reminders: what goes into the notes is the model's).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from claude_agent_sdk import HookMatcher
from claude_agent_sdk.types import HookEvent

log = logging.getLogger("meshd.agent")

FILES = ("learnings.md", "decisions.md", "issues.md")
MAX_FILE = 4_000
MAX_TOTAL = 10_000
REMINDER = (
    "Before you end the run: if you learned something worth keeping, append it to "
    "notes/learnings.md (what works), notes/decisions.md (what you decided and why) or "
    "notes/issues.md (pitfalls, known problems) in your workspace. Keep entries short."
)


def ensure(workspace: Path) -> None:
    folder = workspace / "notes"
    folder.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        path = folder / name
        if not path.exists():
            path.write_text(f"# {name[:-3].capitalize()}\n\n")


def _tail(path: Path, limit: int) -> str:
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return ""
    return text if len(text) <= limit else "…(older part cut)\n" + text[-limit:]


def section(workspace: Path) -> str:
    """The notes part of the system prompt ('' when there is nothing in them)."""
    parts: list[str] = []
    used = 0
    for rel in ("CLAUDE.md", *(f"notes/{n}" for n in FILES)):
        body = _tail(workspace / rel, min(MAX_FILE, MAX_TOTAL - used))
        # An untouched template ("# Learnings") says nothing.
        if not body or (body.count("\n") == 0 and body.startswith("# ")):
            continue
        used += len(body)
        parts.append(f"--- {rel} ---\n{body}")
        if used >= MAX_TOTAL:
            break
    if not parts:
        return ""
    return "Your notes, from your workspace (yours to keep up to date):\n" + "\n".join(parts)


def hooks() -> dict[HookEvent, list[HookMatcher]]:
    async def pre_compact(data: Any, tool_use_id: str | None, context: Any) -> dict[str, Any]:
        log.info("session compaction: reminding the model to save its notes")
        return {"systemMessage": REMINDER}

    return {"PreCompact": [HookMatcher(hooks=[pre_compact])]}
