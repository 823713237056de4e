"""``mesh agent`` and a model API it cannot use: refused at start, or a run that fails fast.

The real agent process, SDK and CLI and the real gateway; the model API is the
scripted stand-in (tests/support/model_server.py), a closed port, or a stand-in
that refuses the key. Every failure must name the model API's URL.
"""

from __future__ import annotations

from devstack.process import free_port
from tests.meshd.agent_support import DONE, agent_proc, ask, started, task_of
from tests.meshd.support import mesh_env, run_mesh
from tests.support.isolated import wait_until
from tests.support.model_server import ModelServer, Reply

LOGIN_VARS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "CLAUDE_CONFIG_DIR")


async def _agent_start(gateway, agent, tmp_path, **env: str) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    home = tmp_path / "home-a"
    home.mkdir(parents=True, exist_ok=True)
    full = mesh_env(gateway, agent.api_key, tmp_path, HOME=str(home),
                    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", **env)  # fmt: skip
    for name in LOGIN_VARS:
        if name not in env:
            full.pop(name, None)
    code, _, err = await run_mesh("agent", "--state-dir", str(tmp_path / "state-a"), env=full, timeout=60)
    return code, err


async def test_a_closed_port_refuses_the_start_naming_the_url(world, uniq, gateway, tmp_path):
    agent = await world.alice.agent(f"m{uniq}")
    url = f"http://127.0.0.1:{free_port()}"
    code, err = await _agent_start(gateway, agent, tmp_path, ANTHROPIC_BASE_URL=url,
                                   ANTHROPIC_API_KEY="sk-ant-test")  # fmt: skip
    assert code != 0
    assert url in err and "unreachable" in err and "ANTHROPIC_BASE_URL" in err
    assert "following the SSE stream" not in err  # it never went to work


async def test_no_key_refuses_the_start_saying_what_to_set(world, uniq, gateway, tmp_path):
    agent = await world.alice.agent(f"m{uniq}")
    with ModelServer() as model:
        code, err = await _agent_start(gateway, agent, tmp_path, ANTHROPIC_BASE_URL=model.url)
        assert code != 0
        assert "no model API credentials" in err and "ANTHROPIC_API_KEY" in err and model.url in err
        assert model.requests == []


async def test_a_key_the_api_refuses_stops_the_start(world, uniq, gateway, tmp_path):
    agent = await world.alice.agent(f"m{uniq}")
    with ModelServer(accept_key="sk-ant-the-right-one") as model:
        code, err = await _agent_start(gateway, agent, tmp_path, ANTHROPIC_BASE_URL=model.url,
                                       ANTHROPIC_API_KEY="sk-ant-a-wrong-one")  # fmt: skip
    assert code != 0
    assert model.url in err and "HTTP 401" in err and "ANTHROPIC_API_KEY" in err
    assert "invalid x-api-key" in err


async def test_skip_model_check_starts_without_asking_the_model(world, uniq, gateway, tmp_path):
    agent = await world.alice.agent(f"m{uniq}")
    url = f"http://127.0.0.1:{free_port()}"
    with ModelServer() as model:
        env = model.env(str(tmp_path / "home-a")) | {"ANTHROPIC_BASE_URL": url}
        proc = agent_proc(gateway, agent, tmp_path, "a", model, "--skip-model-check")
        proc.env.update(env)
        try:
            await started(proc)
        finally:
            await proc.stop()


async def test_a_model_that_dies_mid_session_fails_the_task_fast_naming_the_url(world, uniq, gateway,
                                                                                 tmp_path):
    agent = await world.alice.agent(f"m{uniq}")
    with ModelServer(lambda req: Reply(text="Fine.")) as model:
        proc = agent_proc(gateway, agent, tmp_path, "a", model)
        try:
            await started(proc)
            await ask(world.alice, agent.agent_id, "First?")
            await proc.wait_log(DONE)
            model.kill()
            task = await ask(world.alice, agent.agent_id, "Second?")

            async def failed() -> dict | None:  # type: ignore[type-arg]
                got = await task_of(world.alice, task["task_id"])
                return got if got["state"] == "failed" else None

            # bounded well below the run's --timeout (900 s) and the CLI's own minutes of retries
            got = await wait_until(failed, "the task failed", 120, interval=0.5)
        finally:
            await proc.stop()
    note = "".join(p.get("text", "") for p in (got["status_message"] or {}).get("parts", []))
    assert model.url in note and "unreachable" in note, note
