"""``mesh mcp`` driven over stdio by the official MCP client, against the real gateway."""

from __future__ import annotations

import json
import sys

from mcp import Client
from mcp.client.stdio import StdioServerParameters

from meshd import MeshClient
from tests.meshd.support import REPO

TOOLS = {
    "mesh_whoami",
    "mesh_list_friends",
    "mesh_list_groups",
    "mesh_get_roster",
    "mesh_get_agent_card",
    "mesh_send_message",
    "mesh_reply",
    "mesh_set_task_status",
    "mesh_get_task",
    "mesh_check_inbox",
    # teams (tested in test_teams_gateway.py)
    "mesh_notify_group",
    "mesh_broadcast",
    "mesh_get_timeline",
    "mesh_search_directory",
}


def params(url: str, api_key: str, tmp) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "meshd.cli", "mcp"],
        cwd=str(REPO),
        env={
            "MESH_URL": url,
            "MESH_API_KEY": api_key,
            "MESH_CONFIG": str(tmp / "none.json"),
            "PYTHONPATH": str(REPO),
        },
    )


async def call(client: Client, name: str, **args):
    result = await client.call_tool(name, args)
    text = "".join(getattr(c, "text", "") for c in result.content)
    if result.is_error:
        return None, text
    data = result.structured_content
    return (data if data is not None else json.loads(text)), None


async def test_every_tool_over_stdio(world, gateway, uniq, tmp_path):
    a_h, b_h = await world.pair(uniq)
    stranger = await (await world.factory.owner()).agent(f"s{uniq}")  # own agents trust each other
    gid = f"mcp-{uniq}"
    assert (await world.bob.post("/v1/groups", {"group_id": gid, "name": "MCP"})).status_code == 201
    r = await world.bob.post(f"/v1/groups/{gid}/members", {"agent_id": b_h.agent_id})
    assert r.status_code == 201

    async with (
        Client(params(gateway, b_h.api_key, tmp_path)) as client,
        MeshClient(gateway, api_key=a_h.api_key) as a,
    ):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == TOOLS
        for t in tools.values():
            assert t.description and t.input_schema["type"] == "object"
        assert tools["mesh_set_task_status"].input_schema["properties"]["state"]["enum"]

        me, _ = await call(client, "mesh_whoami")
        assert me["agent_id"] == b_h.agent_id
        friends, _ = await call(client, "mesh_list_friends")
        assert a_h.agent_id in [f["agent_id"] for f in friends["friends"]]
        groups, _ = await call(client, "mesh_list_groups")
        assert gid in [g["group_id"] for g in groups["groups"]]
        roster, _ = await call(client, "mesh_get_roster", group_id=gid)
        assert [m["agent_id"] for m in roster["members"]] == [b_h.agent_id]
        card, _ = await call(client, "mesh_get_agent_card", agent_id=a_h.agent_id)
        assert card["agent_id"] == a_h.agent_id

        sent, _ = await call(client, "mesh_send_message", to_agent_id=a_h.agent_id, text="hi a")
        assert sent["state"] == "submitted" and sent["serving_agent"] == a_h.agent_id
        assert (await a.get_task(sent["task_id"])).messages[0].text == "hi a"

        # work arrives; the model reads it, answers and closes the task
        task = await a.send(b_h.agent_id, "summarise PR 7", data={"pr": 7})
        inbox, _ = await call(client, "mesh_check_inbox", wait_seconds=5)
        new = [e for e in inbox["events"] if e.get("task_id") == task.task_id]
        assert new[0]["type"] == "task.created" and new[0]["text"] == "summarise PR 7"
        assert new[0]["from"] == a_h.agent_id and new[0]["other_parts"][0]["data"] == {"pr": 7}
        again, _ = await call(client, "mesh_check_inbox")
        assert again["count"] == 0  # marked read

        replied, _ = await call(client, "mesh_reply", task_id=task.task_id, text="LGTM")
        assert replied["sent"]
        for state in ("working", "completed"):
            out, _ = await call(
                client, "mesh_set_task_status", task_id=task.task_id, state=state, message="ok"
            )
            assert out["state"] == state
        got, _ = await call(client, "mesh_get_task", task_id=task.task_id)
        assert got["state"] == "completed"
        assert [m["text"] for m in got["messages"]][:2] == ["summarise PR 7", "LGTM"]

        # failures come back as tool errors that say what to do next
        _, err = await call(client, "mesh_set_task_status", task_id=task.task_id, state="working")
        assert "mesh_get_task" in err and "working →" in err
        _, err = await call(client, "mesh_reply", task_id=task.task_id, text="more")
        assert "mesh_send_message" in err
        _, err = await call(client, "mesh_send_message", to_agent_id=stranger.agent_id, text="x")
        assert "mesh_list_friends" in err
        _, err = await call(client, "mesh_get_task", task_id="t-does-not-exist")
        assert "Not found: no task" in err
        _, err = await call(client, "mesh_send_message", to_agent_id="bad id", text="x")
        assert "Invalid input" in err
        _, err = await call(client, "mesh_check_inbox", wait_seconds=99)
        assert err  # schema bound: wait_seconds <= 30


async def test_bad_credentials_say_a_human_must_fix_them(gateway, tmp_path):
    async with Client(params(gateway, "mk_wrong_key", tmp_path)) as client:
        _, err = await call(client, "mesh_whoami")
    assert "MESH_API_KEY" in err and "Do not retry" in err
