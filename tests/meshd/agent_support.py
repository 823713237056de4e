"""Helpers for the ``mesh agent`` tests: real agent processes, the real SDK and CLI, a scripted model."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.meshd.support import Proc, mesh_cmd, mesh_env
from tests.support.meshapi import AgentHandle, OwnerHandle
from tests.support.model_server import ModelServer, Request

if os.environ.get("CI") != "true":  # in CI the extra is installed, and its absence must fail
    pytest.importorskip("claude_agent_sdk")

FAST = ["--reconnect-initial", "0.2", "--reconnect-max", "2", "--heartbeat", "5",
        "--retry-initial", "0.2", "--grace", "5"]  # fmt: skip
DONE = r"run for seq \d+ done"
TASK_RE = re.compile(r"task_id: (\S+)")


def agent_proc(url: str, handle: AgentHandle, tmp: Path, name: str, model: ModelServer, *args: str,
               env: dict[str, str] | None = None) -> Proc:
    """``mesh agent`` for ``handle``, its model API being ``model``; state and HOME under
    ``tmp``; ``env`` added to its environment."""
    home = tmp / f"home-{name}"
    home.mkdir(parents=True, exist_ok=True)
    env = mesh_env(url, handle.api_key, tmp, **model.env(str(home)), **(env or {}))
    argv = mesh_cmd("agent", "--state-dir", str(tmp / f"state-{name}"), *FAST, *args)
    return Proc(argv, env, name=f"agent {name}")


def task_in_prompt(req: Request) -> str:
    m = TASK_RE.search(req.prompt)
    assert m, f"no task_id in the prompt:\n{req.prompt}"
    return m.group(1)


def first_task_in_history(req: Request) -> str:
    """The task id of the conversation's first wake-up prompt (needs the resumed session)."""
    m = TASK_RE.search(req.all_text)
    assert m, "no task_id anywhere in the conversation"
    return m.group(1)


async def ask(person: OwnerHandle | AgentHandle, to: str, text: str) -> dict[str, Any]:
    body = {"to_agent_id": to, "message": {"parts": [{"kind": "text", "text": text}]}}
    resp = await person.post("/v1/mesh/tasks", body)
    assert resp.status_code == 201, resp.text
    return resp.json()  # type: ignore[no-any-return]


async def say(person: OwnerHandle | AgentHandle, task_id: str, text: str) -> None:
    body = {"parts": [{"kind": "text", "text": text}]}
    resp = await person.post(f"/v1/mesh/tasks/{task_id}/messages", body)
    assert resp.status_code == 201, resp.text


async def task_of(who: OwnerHandle | AgentHandle, task_id: str) -> dict[str, Any]:
    resp = await who.get(f"/v1/mesh/tasks/{task_id}")
    assert resp.status_code == 200, resp.text
    return resp.json()  # type: ignore[no-any-return]


def closing(message: dict[str, Any]) -> bool:
    """The runtime's own closing note (a state change carrying the run's figures)."""
    return bool(((message.get("metadata") or {}).get("mesh_run") or {}).get("closing"))


def texts_by(task: dict[str, Any], sender: str) -> list[str]:
    """What ``sender`` said on the task (the runtime's closing notes left out)."""
    return [
        "".join(p.get("text", "") for p in m["parts"] if p.get("kind") == "text")
        for m in task["messages"]
        if m.get("sender") == sender and not closing(m)
    ]


def runs(tmp: Path, name: str) -> list[dict[str, Any]]:
    path = tmp / f"state-{name}" / "runs.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


async def started(proc: Proc) -> Proc:
    await proc.start()
    await proc.wait_log("following the SSE stream")
    return proc


async def killed_mid_run_and_restarted(proc: Proc, url: str, handle: AgentHandle, tmp: Path,
                                       model: ModelServer, first_try: dict[str, bool],
                                       hold: Any) -> tuple[Proc, int]:
    """``kill -9`` the agent while its run is held by the scripted model, let later
    runs through (``first_try``/``hold``), start it again and await its rerun.
    Returns the new process and the number of model turns before the restart."""
    proc.signal(signal.SIGKILL)
    await proc.wait()
    first_try["on"] = False
    hold.set()
    before = len(model.agent_turns())
    proc = agent_proc(url, handle, tmp, "a", model)
    await started(proc)
    await proc.wait_log(DONE)
    return proc, before


async def wait_runs(proc: Proc, n: int) -> None:
    """Await the n-th finished run of ``proc`` (counting from its start)."""
    after = 0
    for _ in range(n):
        line = await proc.wait_log(DONE, after=after)
        after = proc.lines.index(line, after) + 1


async def await_message(person: OwnerHandle | AgentHandle, task_id: str, sender: str,
                        timeout: float = 90.0) -> dict[str, Any]:
    """Long-poll ``person``'s inbox until a message from ``sender`` on ``task_id`` arrives."""
    import asyncio

    after = 0
    async with asyncio.timeout(timeout):
        while True:
            resp = await person.get("/v1/mesh/inbox", params={"after": after, "wait": 10, "limit": 100})
            assert resp.status_code == 200, resp.text
            page = resp.json()
            for e in page["events"]:
                if e["type"] == "task.message" and e["task_id"] == task_id and e["from_agent_id"] == sender:
                    return e  # type: ignore[no-any-return]
            after = page["next_after"]


async def console_get(owner: OwnerHandle, path: str) -> str:
    """``path`` of the owner console, as ``owner`` signed in through the sign-in form."""
    import httpx

    # Its own cookie jar: the shared client stays a bearer-token client.
    async with httpx.AsyncClient(base_url=owner.http.base_url) as http:
        pre = (await http.get("/console/signin")).cookies["mesh_console_pre"]
        resp = await http.post("/console/signin", data={"username": owner.username,
                                                        "password": owner.password, "csrf": pre})
        assert resp.status_code == 303, resp.text
        page = await http.get(path)
    assert page.status_code == 200, page.text
    return page.text
