"""The team commands of meshd against the real gateway: the SDK methods, the
``mesh`` CLI commands and the MCP tools for group posts, broadcasts, timelines
and the directory, and how the agent runtime renders a
settled broadcast for its model."""

from __future__ import annotations

from mcp import Client

from meshd import MeshClient
from meshd.agent.prompt import wake_prompt
from meshd.models import InboxEvent
from tests.meshd.support import mesh_env, run_mesh, run_mesh_json
from tests.meshd.test_mcp_gateway import call, params


async def test_sdk_cli_and_mcp_for_teams(world, gateway, uniq, tmp_path):
    a_h, b_h = await world.pair(uniq)
    gid = f"team-{uniq}"
    assert (await world.bob.post("/v1/groups", {"group_id": gid, "name": "T"})).status_code == 201
    helper = await world.bob.agent(f"h{uniq}", description=f"finds {uniq} bugs",
                                   skills=[{"id": f"bugs-{uniq}", "name": "bugs"}])
    for member in (b_h, helper):
        r = await world.bob.post(f"/v1/groups/{gid}/members", {"agent_id": member.agent_id})
        assert r.status_code == 201
    assert (await world.bob.patch(f"/v1/agents/{helper.agent_id}",
                                  {"listed": True})).status_code == 200
    env = mesh_env(gateway, b_h.api_key, tmp_path)

    async with MeshClient(gateway, api_key=b_h.api_key) as b, \
            MeshClient(gateway, api_key=helper.api_key) as h, \
            MeshClient(gateway, api_key=a_h.api_key) as a:
        # SDK
        posted = await b.post_group(gid, "standup at 10")
        assert posted["recipients"] == 1
        got = (await h.poll_inbox(0)).events
        assert got[-1].type == "group.message" and got[-1].text == "standup at 10"
        bc = await b.broadcast("ready?", to_agent_ids=[a_h.agent_id, helper.agent_id],
                               policy="any", timeout_seconds=60)
        assert bc["status"] == "open" and len(bc["task_ids"]) == 2
        helper_task = next(r["task_id"] for r in bc["recipients"]
                           if r["agent_id"] == helper.agent_id)
        await h.set_status(helper_task, "working")
        await h.set_status(helper_task, "completed", "yes")
        done = await b.get_broadcast(bc["broadcast_id"])
        assert done["status"] == "met"
        page = await a.timeline(bc["context_id"])
        assert [e["kind"] for e in page["entries"]][:2] == ["task", "message"]
        found = await a.directory(uniq, skill=f"bugs-{uniq}")
        assert [x["agent_id"] for x in found["agents"]] == [helper.agent_id]

        # the agent runtime's view of the broadcast.completed the sender got
        [event] = [e for e in (await b.poll_inbox(0)).events if e.type == "broadcast.completed"]
        prompt = wake_prompt(InboxEvent.model_validate(event.model_dump()), b_h.agent_id, None)
        assert "policy was met" in prompt and helper.agent_id in prompt and "yes" in prompt

        # CLI
        out = await run_mesh_json("notify-group", gid, "from the cli", env=env)
        assert out["recipients"] == 1
        out = await run_mesh_json("broadcast", "cli?", "--group", gid, "--policy", "all",
                                  "--timeout", "60", env=env)
        assert [r["agent_id"] for r in out["recipients"]] == [helper.agent_id]
        code, text, err = await run_mesh("broadcast", "--show", out["broadcast_id"], env=env)
        assert code == 0 and "[open]" in text and helper.agent_id in text, err
        code, _, err = await run_mesh("broadcast", "no audience", env=env)
        assert code == 2 and "--to" in err
        timeline = await run_mesh_json("timeline", out["context_id"], env=env)
        assert timeline["entries"][0]["task"]["serving_agent"] == helper.agent_id
        code, text, _ = await run_mesh("timeline", out["context_id"], env=env)
        assert code == 0 and "cli?" in text
        listed = await run_mesh_json("directory", uniq, "--skill", f"bugs-{uniq}", env=env)
        assert [x["agent_id"] for x in listed["agents"]] == [helper.agent_id]
        code, text, _ = await run_mesh("directory", uniq, env=env)
        assert code == 0 and helper.agent_id in text

    # MCP
    async with Client(params(gateway, b_h.api_key, tmp_path)) as client:
        sent, err = await call(client, "mesh_notify_group", group_id=gid, text="via mcp")
        assert err is None and sent["recipients"] == 1
        bc, err = await call(client, "mesh_broadcast", text="mcp?", group_id=gid, policy="any",
                             timeout_seconds=60)
        assert err is None and bc["status"] == "open" and len(bc["task_ids"]) == 1
        tl, err = await call(client, "mesh_get_timeline", context_id=bc["context_id"])
        assert err is None and [e["kind"] for e in tl["entries"]] == ["task", "message"]
        assert tl["entries"][1]["text"] == "mcp?"
        found, err = await call(client, "mesh_search_directory", query=uniq)
        assert err is None and [x["agent_id"] for x in found["agents"]] == [helper.agent_id]
        _, err = await call(client, "mesh_broadcast", text="x", to_agent_ids=["ghost@nobody"])
        assert err and "ghost@nobody" in err


async def test_agent_runtime_team_tools(world, gateway, uniq):
    """The in-process tools `mesh agent` gives its model, called as the model would."""
    import json

    from meshd.agent.tools import RunContext, build_tools

    a_h, b_h = await world.pair(uniq)
    gid = f"rt-{uniq}"
    assert (await world.bob.post("/v1/groups", {"group_id": gid, "name": "RT"})).status_code == 201
    other = await world.bob.agent(f"o{uniq}")
    for member in (b_h, other):
        assert (await world.bob.post(f"/v1/groups/{gid}/members",
                                     {"agent_id": member.agent_id})).status_code == 201
    async with MeshClient(gateway, api_key=b_h.api_key) as b:
        [event] = (await b.poll_inbox(0, limit=1)).events
        tools = {t.name: t.handler for t in build_tools(RunContext(b, b_h.agent_id, event, "run-1"))}

        async def use(name: str, **args):
            out = await tools[name](args)
            assert not out.get("is_error"), out
            return json.loads(out["content"][0]["text"])

        assert (await use("mesh_notify_group", group_id=gid, text="hello team"))["recipients"] == 1
        bc = await use("mesh_broadcast", text="who is free?", to_agent_ids=[a_h.agent_id],
                       policy="any", timeout_seconds=30)
        assert bc["status"] == "open"
        tl = await use("mesh_get_timeline", context_id=bc["context_id"])
        assert [e["kind"] for e in tl["entries"]] == ["task", "message"]
        assert (await use("mesh_search_directory", query=f"nothing-{uniq}"))["agents"] == []
        refused = await tools["mesh_broadcast"]({"text": "x", "to_agent_ids": ["ghost@nobody"]})
        assert refused["is_error"] and "ghost@nobody" in refused["content"][0]["text"]
