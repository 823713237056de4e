"""The ``mesh up`` file: the example in docs/meshd.md parses, and mistakes name entry and field."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from meshd.errors import ConfigError
from meshd.up.spec import parse_up
from meshd.up.status import STATUS_FILE, agent_status, status_rows

REPO = Path(__file__).resolve().parents[4]
DOC = REPO / "docs" / "meshd.md"


def doc_example() -> str:
    (text,) = re.findall(r"```toml\n(.*?)```", DOC.read_text(), re.S)
    return text


def test_the_documented_example_parses(tmp_path):
    plan = parse_up(doc_example(), tmp_path / "agents.toml")
    assert [(a.id, a.kind) for a in plan.agents] == [
        ("helper@dana", "daemon"), ("reviewer@dana", "agent"), ("notes@dana", "daemon"),
    ]  # fmt: skip
    helper, reviewer, notes = plan.agents
    assert helper.key_file == tmp_path / "keys" / "helper.key"
    assert helper.argv()[:7] == ["daemon", "--exec", "./reply.sh", "--timeout", "120", "--attempts", "5"]
    assert reviewer.state_dir == tmp_path / "state" / "reviewer"
    assert reviewer.entry.env == {"ANTHROPIC_MODEL": "claude-sonnet-4-5"}
    assert "--allow-tool" in reviewer.argv() and "--no-plans" in reviewer.argv()
    assert notes.entry.keyring and notes.argv()[-2:] == ["--state-dir", str(notes.state_dir)]
    assert plan.spec.restart.maximum == 60 and plan.spec.stop_timeout == 30


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ("[[agents]]\nid = 'a'\n[agents.daemon]\nexec = 'x'\n",
         "agents[0] (a): needs exactly one credentials"),
        ("[[agents]]\nid = 'a'\nkey_env = 'K'\n", "agents[0] (a): needs exactly one of a [daemon]"),
        ("[[agents]]\nid = 'a'\nkey_env = 'K'\nkye = 1\n[agents.daemon]\nexec = 'x'\n",
         "agents[0] (a).kye: Extra inputs are not permitted"),
        ("[[agents]]\nid = 'a'\nkey_env = 'K'\n[agents.agent]\nmax_turns = 'many'\n",
         "agents[0] (a).agent: argument --max-turns: not a number"),
        ("[[agents]]\nid = 'a'\nkey_env = 'K'\n[agents.daemon]\nexec = 'x'\nstate_dir = 's'\n",
         "agents[0] (a).daemon.state_dir: set by `mesh up` itself"),
        ("[[agents]]\nid = 'a'\nkey_env = 'K'\n[agents.daemon]\nhandler = 'm:f'\nexec = 'x'\n",
         "not allowed with argument"),
        ("[[agents]]\nid = 'a'\nkey_env = 'K'\n[agents.daemon]\nexec = 'x'\n"
         "[[agents]]\nid = 'a'\nkey_file = 'k'\n[agents.daemon]\nexec = 'y'\n", "agent id 'a' appears twice"),
        ("agents = []\n", "agents: List should have at least 1 item"),
        ("[[agents]\n", "not valid TOML"),
    ],
)  # fmt: skip
def test_mistakes_are_one_message_naming_the_entry_and_field(tmp_path, toml, expected):
    with pytest.raises(ConfigError) as e:
        parse_up(toml, tmp_path / "f.toml")
    assert expected in str(e.value) and "\n" not in str(e.value)


def test_keys_come_from_the_entry_source(tmp_path):
    plan = parse_up(
        "[[agents]]\nid = 'a'\nkey_file = 'a.key'\n[agents.daemon]\nexec = 'x'\n"
        "[[agents]]\nid = 'b'\nkey_env = 'B_KEY'\n[agents.daemon]\nexec = 'x'\n",
        tmp_path / "f.toml",
    )
    a, b = plan.agents
    with pytest.raises(ConfigError, match="cannot read key_file"):
        a.api_key({})
    (tmp_path / "a.key").write_text("mk_a\n")
    assert a.api_key({}) == "mk_a"
    with pytest.raises(ConfigError, match="B_KEY"):
        b.api_key({})
    assert b.api_key({"B_KEY": "mk_b"}) == "mk_b"


def test_status_joins_the_state_files(tmp_path):
    plan = parse_up(
        "[[agents]]\nid = 'a'\nkey_env = 'K'\nstate_dir = 'sa'\n[agents.agent]\n"
        "[[agents]]\nid = 'b'\nkey_env = 'K'\nstate_dir = 'sb'\n[agents.daemon]\nexec = 'x'\n",
        tmp_path / "f.toml",
    )
    a, b = plan.agents
    a.state_dir.mkdir()
    now = time.time()
    (a.state_dir / "state.json").write_text(json.dumps({"cursor": 7, "handled": ["e6", "e7"]}))
    (a.state_dir / "runs.jsonl").write_text(
        json.dumps({"event_id": "e1", "cost_usd": 9.0, "at": now - 3 * 86400}) + "\n"
        + json.dumps({"event_id": "e7", "cost_usd": 0.25, "at": now - 5}) + "\n"
        + '{"event_id": "e8", "cost'  # cut short by a crash
    )  # fmt: skip
    (a.state_dir / STATUS_FILE).write_text(
        json.dumps({"state": "running", "pid": 1234, "supervisor_pid": os.getpid(), "restarts": 2,
                    "last_error": "killed by SIGKILL"})
    )  # fmt: skip
    ra, rb = agent_status(a, now=now), agent_status(b, now=now)
    assert (ra["state"], ra["pid"], ra["restarts"], ra["cursor"]) == ("running", 1234, 2, 7)
    assert (ra["last_event_id"], ra["runs_today"], ra["cost_today_usd"]) == ("e7", 1, 0.25)
    assert rb["state"] == "not started" and rb["runs_today"] is None
    # a supervisor that died without saying so
    (a.state_dir / STATUS_FILE).write_text(json.dumps({"state": "running", "supervisor_pid": 2**22 + 7}))
    assert agent_status(a, now=now)["state"] == "down"
    table = status_rows([ra, rb], now=now)
    assert table[0][0] == "AGENT" and "killed by SIGKILL" in table[1] and "1 / $0.25" in table[1]
