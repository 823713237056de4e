"""``{task}.plan.md`` for high tasks: a checkbox list in the workspace, resumed after a restart.

A high task's work run (after the handshake, or at once when it was waived) is told
to write its plan as ``- [ ] step`` lines in ``{workspace}/{task_id}.plan.md`` and to
tick steps (``- [x]``) as it goes. Every later run for the task, including the
re-run of an event after ``mesh agent`` was killed, reads the file: if a step is
still open, the prompt says which steps are done and which one comes next.
The file is the model's; the runtime only reads it (a missing or unreadable file
means no plan).
"""

from __future__ import annotations

import re
from pathlib import Path

BOX = re.compile(r"^\s*[-*]\s*\[( |x|X)\]\s*(.+?)\s*$", re.M)
SAFE = re.compile(r"[^A-Za-z0-9@._-]")
MAX_CHARS = 20_000

WRITE = """\
This is a high-complexity task. Before the work, write your plan to {path} as a
checkbox list (one `- [ ] step` per line), and tick each step (`- [x]`) as soon as it
is done, so that an interrupted run can continue where it stopped."""

RESUME = """\
Your plan for this task, {path}, is unfinished (a run was interrupted or stopped).
Done: {done}
Next unchecked step: {next}
Continue from that step; do not redo the done ones."""


def path_for(workspace: Path, task_id: str) -> Path:
    return workspace / f"{SAFE.sub('_', task_id)}.plan.md"


def steps(path: Path) -> list[tuple[bool, str]]:
    try:
        text = path.read_text(errors="replace")[:MAX_CHARS]
    except OSError:
        return []
    return [(mark.lower() == "x", step) for mark, step in BOX.findall(text)]


def resume_note(workspace: Path, task_id: str) -> str | None:
    path = path_for(workspace, task_id)
    found = steps(path)
    todo = [s for done, s in found if not done]
    if not todo:
        return None
    done = [s for ok, s in found if ok]
    return RESUME.format(path=path, done="; ".join(done) or "(none)", next=todo[0])


def write_note(workspace: Path, task_id: str) -> str:
    return WRITE.format(path=path_for(workspace, task_id))
