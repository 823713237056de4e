import asyncio
import json
import os
import signal
import sys

import pytest

from meshd.daemon.state import DaemonState, DedupWindow, StateLockedError
from meshd.files import atomic_write_json
from tests.meshd.support import REPO


def test_window_keeps_the_last_n_ids_in_order():
    w = DedupWindow(3)
    for i in range(5):
        w.add(f"e{i}")
    assert w.ids() == ["e2", "e3", "e4"]
    assert "e1" not in w and "e4" in w
    w.add("e2")  # seen again: becomes the newest
    w.add("e5")
    assert w.ids() == ["e4", "e2", "e5"]


def test_state_round_trip(tmp_path):
    s = DaemonState(tmp_path / "a", window=500)
    s.agent_id = "a@b"
    for seq in range(1, 601):
        s.record(seq, f"e{seq}")
    s.pending.append({"kind": "reply", "task_id": "t1"})
    s.save()
    t = DaemonState(tmp_path / "a", window=500).load()
    assert t.cursor == 600 and t.agent_id == "a@b"
    assert len(t.handled) == 500 and "e101" in t.handled and "e100" not in t.handled
    assert t.pending == [{"kind": "reply", "task_id": "t1"}]


def test_a_failed_write_leaves_the_old_state_and_no_temp_files(tmp_path, monkeypatch):
    path = tmp_path / "state.json"
    atomic_write_json(path, {"cursor": 1})

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        atomic_write_json(path, {"cursor": 2})
    assert json.loads(path.read_text()) == {"cursor": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


async def test_kill_9_during_saves_never_leaves_a_torn_file(tmp_path):
    """A process saving in a loop is killed at an arbitrary instant; the file is whole."""
    code = (
        "import sys; from pathlib import Path; from meshd.daemon.state import DaemonState\n"
        "s = DaemonState(Path(sys.argv[1]))\n"
        "for seq in range(1, 10**9):\n"
        "    s.record(seq, f'e{seq}'); s.save()\n"
        "    if seq == 50: print('ready', flush=True)\n"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, str(tmp_path), cwd=str(REPO),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    assert await asyncio.wait_for(proc.stdout.readline(), 60) == b"ready\n"
    proc.send_signal(signal.SIGKILL)
    await proc.wait()
    s = DaemonState(tmp_path).load()
    assert s.cursor is not None and s.cursor >= 50
    assert f"e{s.cursor}" in s.handled and len(s.handled) == min(500, s.cursor)


def test_second_daemon_on_the_same_state_is_refused(tmp_path):
    a = DaemonState(tmp_path)
    a.lock()
    with pytest.raises(StateLockedError, match="another mesh daemon"):
        DaemonState(tmp_path).lock()
    a.unlock()
    DaemonState(tmp_path).lock()
