"""``mesh login --keyring``: the key goes to the OS keyring (here keyrings.alt's file
backend in a private XDG_DATA_HOME), the config file keeps no secret, and later
commands authenticate with the key from there."""

from __future__ import annotations

import json

from tests.meshd.support import mesh_env, run_mesh, run_mesh_json

FILE_BACKEND = "keyrings.alt.file.PlaintextKeyring"
NO_BACKEND = "keyring.backends.fail.Keyring"


def stored_key(tmp_path, account: str) -> str | None:
    """What the file backend holds for ``account`` (read as the backend itself reads it)."""
    from keyrings.alt.file import PlaintextKeyring

    backend = PlaintextKeyring()
    backend.file_path = str(tmp_path / "data" / "python_keyring" / "keyring_pass.cfg")
    return backend.get_password("agent-mesh", account)


def keyring_env(tmp_path, backend: str) -> dict[str, str]:
    env = mesh_env("", None, tmp_path, PYTHON_KEYRING_BACKEND=backend, XDG_DATA_HOME=str(tmp_path / "data"))
    del env["MESH_URL"]
    return env


async def test_login_keyring_keeps_no_secret_in_config_and_commands_read_it(world, gateway, uniq, tmp_path):
    a_h, b_h = await world.pair(uniq)
    env = keyring_env(tmp_path, FILE_BACKEND)
    code, out, err = await run_mesh("login", "--keyring", "--url", gateway, "--api-key", b_h.api_key, env=env)
    assert code == 0, err
    assert "OS keyring" in out
    config = (tmp_path / "home" / "mesh-config.json").read_text()
    assert b_h.api_key not in config and "mk_" not in config
    assert json.loads(config) == {"url": gateway, "keyring": b_h.agent_id}
    # the key went to the backend's file, under the agent's id
    assert stored_key(tmp_path, b_h.agent_id) == b_h.api_key

    # a later command, with no key anywhere but the keyring
    me = await run_mesh_json("whoami", env=env)
    assert me["agent_id"] == b_h.agent_id
    task = await run_mesh("send", a_h.agent_id, "via the keyring", env=env)
    assert task[0] == 0, task[2]

    # logout forgets the key too: the next command has no credentials
    assert (await run_mesh("logout", env=env))[0] == 0
    assert stored_key(tmp_path, b_h.agent_id) is None
    code, _, err = await run_mesh("whoami", "--url", gateway, env=env)
    assert code == 2 and "mesh login" in err


async def test_login_keyring_without_a_backend_is_one_clear_line(world, gateway, uniq, tmp_path):
    _, b_h = await world.pair(uniq)
    env = keyring_env(tmp_path, NO_BACKEND)
    code, out, err = await run_mesh("login", "--keyring", "--url", gateway, "--api-key", b_h.api_key, env=env)
    assert code == 2
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "no OS keyring backend" in err and "drop --keyring" in err
    assert not (tmp_path / "home" / "mesh-config.json").exists()  # nothing half-written


async def test_config_pointing_at_a_keyring_without_backend_says_what_to_do(world, gateway, uniq, tmp_path):
    _, b_h = await world.pair(uniq)
    env = keyring_env(tmp_path, FILE_BACKEND)
    code, _, err = await run_mesh("login", "--keyring", "--url", gateway, "--api-key", b_h.api_key, env=env)
    assert code == 0, err
    env["PYTHON_KEYRING_BACKEND"] = NO_BACKEND
    code, _, err = await run_mesh("whoami", env=env)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "no keyring backend" in err and b_h.agent_id in err
