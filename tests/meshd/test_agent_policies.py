"""``mesh agent``'s collaboration policies (issue 10) against the real SDK, CLI and gateway.

The scripted model stand-in records every request, so a test asserts what the
policies passed to the SDK (effort, thinking) and what the model was shown and
allowed; the gateway shows what was posted. Waits are on log lines and requests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.meshd.agent_support import (
    agent_proc,
    ask,
    started,
    task_of,
    wait_runs,
)
from tests.meshd.support import mesh_env, run_mesh
from tests.support.meshapi import AgentHandle, OwnerHandle
from tests.support.model_server import ModelServer, Reply, Request

NO_RUN = r"no run, "
MODEL = "claude-sonnet-4-6"


async def send(person: OwnerHandle | AgentHandle, to: str, text: str, **metadata: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"parts": [{"kind": "text", "text": text}]}
    if metadata:
        message["metadata"] = metadata
    resp = await person.post("/v1/mesh/tasks", {"to_agent_id": to, "message": message})
    assert resp.status_code == 201, resp.text
    return resp.json()  # type: ignore[no-any-return]


def metrics(tmp: Path, name: str) -> dict[str, int]:
    path = tmp / f"state-{name}" / "policy-metrics.json"
    return json.loads(path.read_text()) if path.exists() else {}


def turn_for(model: ModelServer, task_id: str) -> Request:
    return next(r for r in model.agent_turns() if f"task_id: {task_id}" in r.prompt)


async def test_complexity_level_picks_effort_and_thinking_sent_to_the_model(world, uniq, gateway, tmp_path):
    agent = await world.alice.agent(f"r{uniq}")
    sender = await world.alice.agent(f"s{uniq}")
    await world.factory.befriend(sender, agent)
    with ModelServer(lambda req: Reply(text="done")) as model:
        # A model that takes effort, adaptive and disabled thinking: the CLI's default model rejects
        # disabled thinking and keeps adaptive (its "rejects_disabled_thinking" capability).
        proc = agent_proc(gateway, agent, tmp_path, "a", model, "--handshake", "off", "--model", MODEL)
        try:
            await started(proc)
            low = await ask(world.alice, agent.agent_id, "What is six times seven?")
            medium = await ask(world.alice, agent.agent_id, "Read the notes first, then summarise them.")
            high_zh = await ask(world.alice, agent.agent_id, "重构 task 模块的状态机逻辑，抽到独立文件")
            # Explicit beats inferred: a plain question sent as high, with `mesh send --complexity`.
            code, out, err = await run_mesh("send", agent.agent_id, "What is 2+2?", "--complexity", "high",
                                            env=mesh_env(gateway, sender.api_key, tmp_path))  # fmt: skip
            assert code == 0, err
            explicit_low = await send(world.alice, agent.agent_id, "Redesign the system", complexity="low")
            await wait_runs(proc, 5)
        finally:
            await proc.stop()
        high_cli = out.strip()
        got = {name: turn_for(model, t).body for name, t in
               [("low", low["task_id"]), ("medium", medium["task_id"]), ("high_zh", high_zh["task_id"]),
                ("high_cli", high_cli), ("explicit_low", explicit_low["task_id"])]}  # fmt: skip
    effort = {k: (b.get("output_config") or {}).get("effort") for k, b in got.items()}
    thinking = {k: (b.get("thinking") or {}).get("type") for k, b in got.items()}
    assert effort == {"low": "low", "medium": "medium", "high_zh": "high", "high_cli": "high",
                      "explicit_low": "low"}, effort  # fmt: skip
    assert thinking["medium"] == thinking["high_zh"] == thinking["high_cli"] == "adaptive", thinking
    assert thinking["low"] == thinking["explicit_low"] == "disabled", thinking
    # The level is on the reply's metadata and counted.
    reply = next(m for m in (await task_of(world.alice, high_zh["task_id"]))["messages"]
                 if m["sender"] == agent.agent_id)  # fmt: skip
    assert reply["metadata"]["mesh_policy"]["complexity"] == "high"
    m = metrics(tmp_path, "a")
    assert m["complexity_low"] == 2 and m["complexity_medium"] == 1 and m["complexity_high"] == 2
