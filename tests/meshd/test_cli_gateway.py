"""``mesh`` commands as a user runs them: real processes against the real gateway."""

from __future__ import annotations

import asyncio
import json
import stat

from devstack.process import free_port
from meshd import MeshClient
from tests.meshd.support import mesh_cmd, mesh_env, run_mesh, run_mesh_json


async def test_login_then_every_command(world, gateway, uniq, tmp_path):
    a_h, b_h = await world.pair(uniq)
    gid = f"cli-{uniq}"
    assert (await world.bob.post("/v1/groups", {"group_id": gid, "name": "CLI"})).status_code == 201
    await world.bob.post(f"/v1/groups/{gid}/members", {"agent_id": b_h.agent_id})

    # login stores URL and key, readable by the owner only; later commands need no env
    env = mesh_env("", None, tmp_path)
    del env["MESH_URL"]
    code, out, err = await run_mesh("login", "--url", gateway, "--api-key", b_h.api_key, env=env)
    assert code == 0, err
    assert b_h.agent_id in out
    config = tmp_path / "home" / "mesh-config.json"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert json.loads(config.read_text()) == {"url": gateway, "api_key": b_h.api_key}

    # read-only commands, human and --json (run side by side)
    (
        (code, whoami, _),
        me,
        friends,
        (_, friends_text, _),
        groups,
        (_, roster, _),
        card,
    ) = await asyncio.gather(
        run_mesh("whoami", env=env),
        run_mesh_json("whoami", env=env),
        run_mesh_json("friends", env=env),
        run_mesh("friends", env=env),
        run_mesh_json("groups", env=env),
        run_mesh("roster", gid, env=env),
        run_mesh_json("card", a_h.agent_id, env=env),
    )
    assert code == 0 and whoami.startswith(b_h.agent_id) and me["agent_id"] == b_h.agent_id
    assert a_h.agent_id in [f["agent_id"] for f in friends["friends"]]
    assert a_h.agent_id in friends_text
    assert gid in [g["group_id"] for g in groups] and b_h.agent_id in roster
    assert card["agent_id"] == a_h.agent_id

    # send prints just the task id; the text may come from stdin
    code, out, err = await run_mesh("send", a_h.agent_id, "-", env=env, stdin=b"from stdin\n")
    assert code == 0, err
    task_id = out.strip()
    async with MeshClient(gateway, api_key=a_h.api_key) as a:
        assert (await a.get_task(task_id)).messages[0].text == "from stdin\n"
        incoming = await a.send(b_h.agent_id, "please ack", data={"n": 1})

    inbox = await run_mesh_json("inbox", "--wait", "5", env=env)
    assert incoming.task_id in [e["task_id"] for e in inbox["events"]]
    code, out, _ = await run_mesh("inbox", env=env)
    assert "task.created" in out and "please ack" in out
    last = inbox["events"][-1]["seq"]
    assert (await run_mesh_json("ack", str(last), env=env))["acked_seq"] == last

    code, out, _ = await run_mesh("reply", incoming.task_id, "acked", env=env)
    assert code == 0 and out.startswith(f"m-{b_h.agent_id}-")
    code, out, _ = await run_mesh("status", incoming.task_id, "working", env=env)
    assert out.strip() == f"{incoming.task_id}: working"
    done = await run_mesh_json("status", incoming.task_id, "completed", "-m", "done", env=env)
    assert done["state"] == "completed"
    code, out, _ = await run_mesh("task", incoming.task_id, env=env)
    assert "[completed]" in out and "please ack" in out and "acked" in out
    tasks = await run_mesh_json("tasks", "--state", "completed", env=env)
    assert incoming.task_id in [t["task_id"] for t in tasks["tasks"]]

    # refusals: exit 1 and the gateway's detail on stderr
    code, _, err = await run_mesh("status", incoming.task_id, "working", env=env)
    assert code == 1 and "409" in err
    code, _, err = await run_mesh("send", "nobody@nowhere", "hi", env=env)
    assert code == 1 and "unknown agent 'nobody@nowhere'" in err

    code, out, _ = await run_mesh("logout", env=env)
    assert code == 0 and not config.exists()
    code, _, err = await run_mesh("whoami", env=env)
    assert code == 2 and "mesh login" in err


async def test_env_credentials_and_exit_codes(pair, gateway, tmp_path):
    a_h, _ = pair
    env = mesh_env(gateway, a_h.api_key, tmp_path)
    assert (await run_mesh_json("whoami", env=env))["agent_id"] == a_h.agent_id
    code, _, err = await run_mesh("whoami", env={**env, "MESH_API_KEY": "mk_bad_key"})
    assert code == 1 and "401" in err
    down = {**env, "MESH_URL": f"http://127.0.0.1:{free_port()}"}
    code, _, err = await run_mesh("whoami", env=down)
    assert code == 3 and "cannot reach the gateway" in err
    code, out, _ = await run_mesh(env=env)
    assert code == 2 and "COMMAND" in out


async def test_tail_follows_the_stream(pair, gateway, tmp_path):
    a_h, b_h = pair
    env = mesh_env(gateway, b_h.api_key, tmp_path)
    proc = await asyncio.create_subprocess_exec(
        *mesh_cmd("tail", "--json"),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        first = json.loads(await asyncio.wait_for(proc.stdout.readline(), 30))
        assert first["type"] == "friend.request"  # the unacked backlog comes first
        async with MeshClient(gateway, api_key=a_h.api_key) as a:
            await a.send(b_h.agent_id, "live")
        event = json.loads(await asyncio.wait_for(proc.stdout.readline(), 30))
        assert event["type"] == "task.created" and event["seq"] == first["seq"] + 1
        assert event["payload"]["message"]["parts"][0]["text"] == "live"
    finally:
        proc.kill()
        await proc.wait()
