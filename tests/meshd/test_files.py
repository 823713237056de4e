"""One atomic-write helper (meshd/files.py) for the daemon state and the config file."""

import json
import stat

from meshd.config import write_config_file
from meshd.daemon.state import DaemonState
from meshd.files import atomic_write_json
from tests.meshd.support import REPO


def test_compact_by_default_pretty_on_request_owner_only(tmp_path):
    atomic_write_json(tmp_path / "a.json", {"b": [1, 2]})
    assert (tmp_path / "a.json").read_text() == '{"b":[1,2]}'
    atomic_write_json(tmp_path / "p.json", {"b": 1}, indent=2)
    assert (tmp_path / "p.json").read_text() == '{\n  "b": 1\n}\n'
    for name in ("a.json", "p.json"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "p.json"]


def test_state_and_config_files_use_it(tmp_path):
    s = DaemonState(tmp_path / "state")
    s.record(3, "e3")
    s.save()
    assert json.loads(s.path.read_text())["cursor"] == 3
    assert stat.S_IMODE(s.path.stat().st_mode) == 0o600
    cfg = tmp_path / "cfg" / "config.json"
    write_config_file(cfg, {"url": "http://x", "api_key": "mk_a_b"})
    assert json.loads(cfg.read_text()) == {"url": "http://x", "api_key": "mk_a_b"}
    assert stat.S_IMODE(cfg.stat().st_mode) == 0o600


def test_no_other_module_renames_files_into_place():
    writers = {
        str(p.relative_to(REPO))
        for p in (REPO / "meshd").rglob("*.py")
        if "os.replace(" in p.read_text() or "mkstemp(" in p.read_text()
    }
    assert writers == {"meshd/files.py"}
