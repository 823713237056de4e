"""docs/meshd.md's Claude sections run as written: ``mesh agent``, and the corrected
``mesh daemon --exec 'claude -p …'`` line, both with the real bundled Claude Code CLI
against the scripted model stand-in and the test gateway."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from tests.meshd.agent_support import DONE, ask, await_message, task_of, texts_by
from tests.meshd.support import Proc
from tests.support.model_server import ModelServer, Reply, Request, use_tool

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "meshd.md"


def bundled_cli() -> Path:
    import claude_agent_sdk  # present: agent_support skips these tests without it (outside CI)

    return Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"


def marked(name: str) -> str:
    text = DOC.read_text()
    start = text.index(f"<!-- {name}:start -->")
    end = text.index(f"<!-- {name}:end -->")
    (block,) = re.findall(r"```bash\n(.*?)```", text[start:end], re.S)
    return block


def doc_env(tmp: Path, gateway: str, api_key: str, model: ModelServer,
            bin_dir: Path | None = None) -> dict[str, str]:
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MESH_", "ANTHROPIC_", "CLAUDE"))}
    paths = [str(bin_dir)] if bin_dir else []
    env.update(model.env(str(home)))
    env.update(
        PATH=os.pathsep.join([*paths, os.path.dirname(sys.executable), os.environ["PATH"]]),
        PYTHONPATH=str(REPO),
        MESH_URL=gateway,
        MESH_API_KEY=api_key,
        MESH_STATE_DIR=str(tmp / "state"),
        MESH_CONFIG=str(home / "mesh-config.json"),
    )
    return env


def answer_via_mesh_reply(req: Request) -> Reply:
    m = re.search(r'task_id"?:\s*"?([A-Za-z0-9][A-Za-z0-9._:@-]+)', req.prompt)
    assert m, req.prompt
    if req.called("mcp__mesh__mesh_reply") == 0:
        return use_tool(req, "mesh_reply", {"task_id": m.group(1), "text": "Paris."})
    return Reply(text="Replied.")


async def test_mesh_agent_section_runs_as_written(world, uniq, gateway, tmp_path):
    agent = await world.alice.agent(f"helper{uniq}")
    with ModelServer(answer_via_mesh_reply) as model:
        env = doc_env(tmp_path, gateway, agent.api_key, model)
        proc = Proc(["bash", "-c", marked("meshd-agent")], env, name="doc agent")
        try:
            await proc.start()
            await proc.wait_log("following the SSE stream")
            task = await ask(world.alice, agent.agent_id, "What is the capital of France?")
            await proc.wait_log(DONE)
        finally:
            await proc.stop()
    assert texts_by(await task_of(world.alice, task["task_id"]), agent.agent_id) == ["Paris."]
    assert (tmp_path / "home" / "agents" / "helper").is_dir()  # the --workspace of the example


async def test_daemon_exec_claude_line_runs_as_written(world, uniq, gateway, tmp_path):
    agent = await world.alice.agent(f"helper{uniq}")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "claude").symlink_to(bundled_cli())
    work = tmp_path / "work"
    work.mkdir()
    (mcp_json,) = re.findall(r"```json\n(.*?)```", DOC.read_text(), re.S)
    config = json.loads(mcp_json)
    config["mcpServers"]["mesh"]["env"]["MESH_URL"] = gateway
    (work / ".mcp.json").write_text(json.dumps(config))
    with ModelServer(answer_via_mesh_reply) as model:
        env = doc_env(tmp_path, gateway, agent.api_key, model, bin_dir)
        proc = Proc(["bash", "-c", f"cd {work} && {marked('meshd-exec-claude')}"], env, name="doc daemon")
        try:
            await proc.start()
            await proc.wait_log("following the SSE stream")
            task = await ask(world.alice, agent.agent_id, "What is the capital of France?")
            await await_message(world.alice, task["task_id"], agent.agent_id)
        finally:
            await proc.stop()
        first = model.agent_turns()[0]
    assert texts_by(await task_of(world.alice, task["task_id"]), agent.agent_id) == ["Paris."]
    assert "mcp__mesh__mesh_check_inbox" not in first.tool_names
