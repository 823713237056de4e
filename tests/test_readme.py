"""The README's walk-through, run verbatim against the test gateway, so it cannot rot.

The shell between ``<!-- walkthrough:start -->`` and ``<!-- walkthrough:end -->``
is extracted and run with bash (``set -euo pipefail``); only ``MESH_URL`` (the
gateway) and ``MESH_SUFFIX`` (unique usernames) come from the environment, the
way the README itself reads them. The "From here…" follow-up block is run too.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
FENCE = re.compile(r"```(?:bash|sh)\n(.*?)```", re.S)


def walkthrough() -> str:
    text = README.read_text()
    start, end = text.index("<!-- walkthrough:start -->"), text.index("<!-- walkthrough:end -->")
    blocks = FENCE.findall(text[start:end])
    assert blocks, "no ```bash block between the walkthrough markers"
    return "\n".join(blocks)


def follow_up() -> str:
    text = README.read_text()
    after = text[text.index("<!-- walkthrough:end -->"):]
    marker = after.index("From here reviewer")
    return FENCE.findall(after[marker:])[0]


async def run_bash(script: str, env: dict[str, str], timeout: float = 120) -> tuple[int, str, str]:
    # Not subprocess.run: the gateway under test runs in this very event loop.
    proc = await asyncio.create_subprocess_exec(
        "bash", "-c", "set -euo pipefail\n" + script,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    return proc.returncode or 0, out.decode(), err.decode()


@pytest.fixture
def shell_env(gateway: str, uniq: str) -> dict[str, str]:
    for tool in ("bash", "curl", "python3"):
        if shutil.which(tool) is None:
            pytest.fail(f"the README walk-through needs {tool} on PATH")
    return {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"),
            "MESH_URL": gateway, "MESH_SUFFIX": uniq}


def last_json(stdout: str) -> dict:
    """The final pretty-printed JSON document of the output."""
    start = stdout.rindex("\n{\n") + 1 if "\n{\n" in stdout else stdout.index("{\n")
    return json.loads(stdout[start:])  # type: ignore[no-any-return]


async def test_readme_walkthrough_runs_verbatim(shell_env, uniq, db):
    rc, out, err = await run_bash(walkthrough(), shell_env)
    assert rc == 0, f"walk-through failed ({rc}):\n--- stdout\n{out}\n--- stderr\n{err}"

    coder, reviewer = f"coder@alice{uniq}", f"reviewer@bob{uniq}"
    assert f"agents: {coder} {reviewer}" in out
    task_id = re.search(r"^task: (\S+)$", out, re.M).group(1)  # type: ignore[union-attr]

    inbox = last_json(out)
    assert [(e["seq"], e["type"]) for e in inbox["events"]] == [(1, "friend.request"),
                                                               (2, "task.created")]
    created = inbox["events"][-1]
    assert created["task_id"] == task_id and created["from_agent_id"] == coder
    assert created["payload"]["message"]["parts"] == [{"kind": "text",
                                                       "text": "Please review PR #7"}]
    assert inbox["next_after"] == 2
    # …and it really is in Postgres for the recipient, with its outbox row.
    assert await db.fetchval("SELECT count(*) FROM inbox_events WHERE agent_id = $1 "
                             "AND task_id = $2", reviewer, task_id) == 1


async def test_readme_follow_up_runs_too(shell_env, uniq):
    rc, out, err = await run_bash(walkthrough() + "\n" + follow_up(), shell_env)
    assert rc == 0, f"follow-up failed ({rc}):\n--- stdout\n{out}\n--- stderr\n{err}"
    task = last_json(out)
    assert task["state"] == "completed"
    assert [m["parts"][0]["text"] for m in task["messages"]] == ["Please review PR #7", "LGTM"]
    assert task["messages"][0]["receipt"]["status"] == "acked"


async def test_walkthrough_failures_are_loud(shell_env):
    """The check above can fail: a step the gateway refuses stops the script with
    a non-zero status and the problem in view (here: the usernames are taken)."""
    rc, _, _ = await run_bash(walkthrough(), shell_env)
    assert rc == 0
    rc, out, err = await run_bash(walkthrough(), shell_env)
    assert rc != 0
    assert "is taken" in out + err


# --- docs/api.md: every ```bash block, in order, after the walk-through -----------------

API_DOC = README.parent / "docs" / "api.md"
BASH_ONLY = re.compile(r"```bash\n(.*?)```", re.S)


def api_doc_examples() -> list[str]:
    return BASH_ONLY.findall(API_DOC.read_text())


async def test_api_doc_examples_run(shell_env, uniq):
    blocks = api_doc_examples()
    assert len(blocks) >= 10
    script = walkthrough() + "\n" + "\n".join(
        f"echo '=== block {i}'\n{block}" for i, block in enumerate(blocks))
    rc, out, err = await run_bash(script, shell_env)
    assert rc == 0, f"docs/api.md example failed ({rc}):\n--- stdout\n{out[-4000:]}\n" \
                    f"--- stderr\n{err[-4000:]}"
    # Spot checks that the examples did what the text around them says.
    assert f"human@alice{uniq}" in out                      # owner token = virtual user
    assert '"state": "completed"' in out                    # the PR #8 task went all the way
    assert '"artifact_id": "review"' in out
    assert '"field":"message.parts.0"' in out and '"field":"urgent"' in out  # the 422 example
    replay = re.findall(rf"^(review-pr-8-{uniq})$", out, re.M)
    assert replay == [f"review-pr-8-{uniq}"]                # the retry printed the same task
    assert "event: friend.accepted" in out or "event: task.created" in out  # SSE
