"""``mesh up`` as a user runs it: one supervisor, three ``mesh daemon --exec`` agents
against the real gateway, one of them killed with ``kill -9`` mid-event.

Each agent's handler appends ``seq event_id text`` to its own file and reports
to its own probe socket; the test counts those (the side effects) and the
replies the gateway stored.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

from meshd import MeshClient
from tests.meshd.support import Probe, Proc, mesh_cmd, mesh_env, process_exit, run_mesh, run_mesh_json
from tests.meshd.test_daemon_gateway import EXEC, lines, skip_backlog

KEYRING = {"PYTHON_KEYRING_BACKEND": "keyrings.alt.file.PlaintextKeyring"}


def up_file(
    tmp: Path, url: str, agents: list[tuple[str, str, dict[str, str]]], stop_timeout: float = 20
) -> Path:
    """A ``mesh up`` file: each agent as (id, credentials line, handler environment)."""
    text = [
        f'url = "{url}"',
        f"stop_timeout = {stop_timeout}",
        "[restart]",
        "initial = 0.2",
        "maximum = 1",
        "",
    ]
    for i, (agent_id, creds, env) in enumerate(agents):
        env_toml = ", ".join(f'{k} = "{v}"' for k, v in env.items())
        text += [
            "[[agents]]", f'id = "{agent_id}"', creds, f'state_dir = "state/r{i}"', f"env = {{ {env_toml} }}",
            "[agents.daemon]", f'exec = "{EXEC}"',
            "reconnect_initial = 0.2", "reconnect_max = 2", "heartbeat = 5", "",
        ]  # fmt: skip
    path = tmp / "mesh.toml"
    path.write_text("\n".join(text))
    return path


async def wait_status(path: Path, predicate, timeout: float = 30) -> dict:
    """Poll the supervisor's status file of one agent until ``predicate`` holds."""
    async with asyncio.timeout(timeout):
        while True:
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                data = {}
            if data and predicate(data):
                return data
            await asyncio.sleep(0.05)


async def test_up_three_agents_restarts_a_killed_one_and_drains_on_sigterm(world, gateway, uniq, tmp_path):
    sender = await world.alice.agent(f"s{uniq}")
    rs = [await world.bob.agent(f"r{i}{uniq}") for i in range(3)]
    for r in rs:
        await world.factory.befriend(sender, r)
        await skip_backlog(gateway, r)

    # three credentials sources: a key file, an environment variable, the keyring
    (tmp_path / "r0.key").write_text(rs[0].api_key + "\n")
    env = mesh_env(
        gateway, None, tmp_path, R1_KEY=rs[1].api_key, XDG_DATA_HOME=str(tmp_path / "data"), **KEYRING
    )
    code, _, err = await run_mesh("login", "--keyring", "--api-key", rs[2].api_key, env=env)
    assert code == 0, err
    (tmp_path / "home" / "mesh-config.json").unlink()  # the supervisor must not lean on it

    marker = tmp_path / "block"
    marker.write_text("")
    outs = [tmp_path / f"r{i}.out" for i in range(3)]
    async with (
        Probe(tmp_path / "p0.sock") as p0,
        Probe(tmp_path / "p1.sock") as p1,
        Probe(tmp_path / "p2.sock") as p2,
    ):
        probes = [p0, p1, p2]
        henv = [{"TEST_OUT": str(outs[i]), "TEST_PROBE": str(probes[i].path)} for i in range(3)]
        henv[0]["TEST_BLOCK_MARKER"] = str(marker)
        creds = ['key_file = "r0.key"', 'key_env = "R1_KEY"', "keyring = true"]
        path = up_file(
            tmp_path, gateway, [(r.agent_id, c, e) for r, c, e in zip(rs, creds, henv, strict=True)]
        )
        status = [tmp_path / "state" / f"r{i}" / "up-status.json" for i in range(3)]

        sup = Proc(mesh_cmd("up", str(path)), env, name="mesh up")
        try:
            await sup.start()
            for r in rs:
                await sup.wait_log(rf"\[{r.agent_id}\] .*following the SSE stream")
            texts0 = ["m0", "m1", "m2", "m3", "m4", "block", "m6", "m7", "m8", "m9"]
            async with MeshClient(gateway, api_key=sender.api_key) as s:
                tasks0 = [await s.send(rs[0].agent_id, t) for t in texts0]
                for r in rs[1:]:
                    for i in range(10):
                        await s.send(r.agent_id, f"x{i}")
                started = await p0.wait_for(1, prefix="started ")
                # agent 0 is stuck in its handler; the two others go on
                assert len(await p1.wait_for(10, prefix="done ")) == 10
                assert len(await p2.wait_for(10, prefix="done ")) == 10
                assert len(await p0.wait_for(5, prefix="done ")) == 5

                # kill -9 agent 0's process mid-event: its handler dies with it
                first = await wait_status(status[0], lambda d: d["state"] == "running")
                os.kill(first["pid"], signal.SIGKILL)
                await process_exit(int(started[0].split()[2]), timeout=10)
                for r in rs[1:]:
                    for i in range(10, 15):
                        await s.send(r.agent_id, f"x{i}")
                # restarted by the supervisor; the killed event is delivered again and handled
                again = await wait_status(
                    status[0], lambda d: d["state"] == "running" and d["pid"] != first["pid"]
                )
                assert again["restarts"] == 1 and again["last_exit"] == -signal.SIGKILL
                await p0.wait_for(10, prefix="done ")
                await p1.wait_for(15, prefix="done ")
                await p2.wait_for(15, prefix="done ")

                # mesh status lists the three, from their state folders
                rows = await run_mesh_json("status", str(path), env=env)
                assert [row["id"] for row in rows] == [r.agent_id for r in rs]
                assert [row["state"] for row in rows] == ["running"] * 3
                assert [row["restarts"] for row in rows] == [1, 0, 0]
                assert rows[0]["last_exit"] == -signal.SIGKILL
                code, table, _ = await run_mesh("status", str(path), env=env)
                assert code == 0 and all(r.agent_id in table for r in rs) and "SIGKILL" in table

                # SIGTERM: every agent drains, the supervisor exits 0
                sup.signal(signal.SIGTERM)
                assert await sup.wait(timeout=40) == 0
                for task, text in zip(tasks0, texts0, strict=True):
                    full = await s.get_task(task.task_id)
                    assert [m.text for m in full.messages] == [text, f"re: {text}"]  # replied once
        finally:
            print(sup.log())
            await sup.stop()

    # every event's side effect once, in order; the killed one ran twice, finished once
    got = [lines(o) for o in outs]
    assert [row[2] for row in got[0]] == texts0
    assert [row[2] for row in got[1]] == [f"x{i}" for i in range(15)] == [row[2] for row in got[2]]
    for rows in got:
        assert len({row[1] for row in rows}) == len(rows)
    block_seq = started[0].split()[1]
    assert (
        p0.lines.count(f"done {block_seq}") == 1
        and len([x for x in p0.lines if x.startswith("started")]) == 1
    )
    for r in rs:
        async with MeshClient(gateway, api_key=r.api_key) as c:
            me = await c.me()
        # Drained, then offline: a clean stop ends `inactive`.
        assert me["acked_seq"] == me["inbox_seq"] and me["status"] == "inactive"
    rows = await run_mesh_json("status", str(path), env=env)
    assert [row["state"] for row in rows] == ["stopped"] * 3


async def test_up_refuses_a_bad_file_in_one_line_naming_entry_and_field(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(
        '[[agents]]\nid = "one"\nkey_env = "K"\n[agents.daemon]\nexec = "true"\n'
        '[[agents]]\nid = "two"\nkey_env = "K"\n[agents.daemon]\nexec = "true"\nmax_turns = 3\n'
    )
    env = mesh_env("http://127.0.0.1:9", None, tmp_path)
    code, _, err = await run_mesh("up", str(path), env=env)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "agents[1] (two).daemon.max_turns" in err and "not an option of `mesh daemon`" in err
    # a key that is not there stops everything before anything starts
    path.write_text('[[agents]]\nid = "one"\nkey_env = "NOT_SET_HERE"\n[agents.daemon]\nexec = "true"\n')
    code, _, err = await run_mesh("up", str(path), env=env)
    assert code == 2 and "NOT_SET_HERE" in err and "Traceback" not in err, err


async def test_up_kills_an_agent_that_does_not_drain_within_stop_timeout(world, gateway, uniq, tmp_path):
    sender, r = await world.pair(uniq)
    await skip_backlog(gateway, r)
    marker = tmp_path / "block"
    marker.write_text("")
    env = mesh_env(gateway, None, tmp_path, R_KEY=r.api_key)
    async with Probe(tmp_path / "p.sock") as probe:
        henv = {
            "TEST_OUT": str(tmp_path / "r.out"),
            "TEST_PROBE": str(probe.path),
            "TEST_BLOCK_MARKER": str(marker),
        }
        # the daemon would wait 15 s (its --grace) for the blocked handler; mesh up waits 1 s
        path = up_file(tmp_path, gateway, [(r.agent_id, 'key_env = "R_KEY"', henv)], stop_timeout=1)
        sup = Proc(mesh_cmd("up", str(path)), env, name="mesh up")
        try:
            await sup.start()
            await sup.wait_log("following the SSE stream")
            async with MeshClient(gateway, api_key=sender.api_key) as s:
                await s.send(r.agent_id, "block")
            started = await probe.wait_for(1, prefix="started ")
            sup.signal(signal.SIGTERM)
            assert await sup.wait(timeout=20) == 1  # not every agent stopped by itself
            await process_exit(int(started[0].split()[2]), timeout=10)  # nor does its handler run on
            assert sup.count("still running 1s after SIGTERM; killed") == 1
        finally:
            print(sup.log())
            await sup.stop()
    rows = await run_mesh_json("status", str(path), env=env)
    assert rows[0]["state"] == "stopped" and rows[0]["last_exit"] == -signal.SIGKILL


async def test_agents_drain_when_the_supervisor_is_killed(world, gateway, uniq, tmp_path):
    _, r = await world.pair(uniq)
    env = mesh_env(gateway, None, tmp_path, R_KEY=r.api_key)
    henv = {"TEST_OUT": str(tmp_path / "r.out"), "TEST_PROBE": str(tmp_path / "unused.sock")}
    path = up_file(tmp_path, gateway, [(r.agent_id, 'key_env = "R_KEY"', henv)])
    # no heartbeat in the test's time: an orphan that only failed to log would not notice
    path.write_text(path.read_text().replace("heartbeat = 5", "heartbeat = 600"))
    sup = Proc(mesh_cmd("up", str(path)), env, name="mesh up")
    try:
        await sup.start()
        await sup.wait_log("following the SSE stream")
        child = await wait_status(
            tmp_path / "state" / "r0" / "up-status.json", lambda d: d["state"] == "running"
        )
        sup.signal(signal.SIGKILL)
        assert await sup.wait() == -signal.SIGKILL
        await process_exit(child["pid"], timeout=30)  # it got SIGTERM from the kernel, and drained
    finally:
        await sup.stop()
    async with MeshClient(gateway, api_key=r.api_key) as c:
        assert (await c.me())["status"] == "inactive"  # the child's clean stop
    rows = await run_mesh_json("status", str(path), env=env)
    assert rows[0]["state"] == "down"  # the supervisor never wrote "stopped"
