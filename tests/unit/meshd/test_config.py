import stat

import pytest

from meshd.config import load_config, write_config_file
from meshd.errors import ConfigError


def test_flags_over_env_over_file(tmp_path):
    path = tmp_path / "c.json"
    write_config_file(path, {"url": "http://file", "api_key": "mk_file_x"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    cfg = load_config(path=path, env={})
    assert (cfg.url, cfg.api_key) == ("http://file", "mk_file_x")
    cfg = load_config(path=path, env={"MESH_URL": "http://env/", "MESH_API_KEY": "mk_env_y"})
    assert (cfg.url, cfg.api_key) == ("http://env", "mk_env_y")
    cfg = load_config(url="http://flag", api_key="mk_f_z", path=path, env={"MESH_URL": "x"})
    assert (cfg.url, cfg.api_key) == ("http://flag", "mk_f_z")
    cfg = load_config(path=path, env={"MESH_TOKEN": "owner-jwt"})
    assert (cfg.api_key, cfg.token) == (None, "owner-jwt")


def test_missing_settings_say_what_to_do(tmp_path):
    with pytest.raises(ConfigError, match="MESH_URL"):
        load_config(path=tmp_path / "none.json", env={}).require()
    with pytest.raises(ConfigError, match="mesh login"):
        load_config(path=tmp_path / "none.json", env={"MESH_URL": "http://x"}).require()
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(path=bad, env={})
