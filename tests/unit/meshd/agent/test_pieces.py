"""Unit checks of the runtime's pure parts: the path guard, the prompts, the session map."""

from __future__ import annotations

import copy
import os

import pytest

from meshd.agent.permissions import outside_path, path_guard
from meshd.agent.prompt import render_parts, system_prompt, wake_prompt
from meshd.agent.sessions import SessionStore
from meshd.models import InboxEvent, Task


@pytest.mark.parametrize(
    ("name", "args", "denied"),
    [
        ("Read", {"file_path": "notes.md"}, False),
        ("Write", {"file_path": "sub/new.txt"}, False),
        ("Read", {"file_path": "/etc/passwd"}, True),
        ("Write", {"file_path": "../escape.txt"}, True),
        ("Edit", {"file_path": "~/.bashrc"}, True),
        ("Glob", {"pattern": "**/*.py"}, False),
        ("Glob", {"pattern": "/etc/*"}, True),
        ("Grep", {"pattern": "secret", "path": "/root"}, True),
        ("Grep", {"pattern": "/etc/passwd"}, False),  # a regex, not a path
    ],
)
def test_outside_path(tmp_path, name, args, denied):
    ws = tmp_path / "ws"
    ws.mkdir()
    assert (outside_path(name, args, [ws]) is not None) is denied


def test_a_symlink_out_of_the_workspace_is_outside(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    os.symlink("/etc", ws / "etc")
    assert outside_path("Read", {"file_path": "etc/passwd"}, [ws.resolve()]) is not None


async def test_the_hook_denies_with_a_reason_and_ignores_other_tools(tmp_path):
    hook = path_guard(tmp_path)
    out = await hook({"tool_name": "Write", "tool_input": {"file_path": "/tmp/x"}}, None, None)
    assert out["hookSpecificOutput"]["permissionDecision"] == "deny"
    other = {"tool_name": "mcp__mesh__mesh_reply", "tool_input": {"task_id": "/x"}}
    assert await hook(other, None, None) == {}


def _event(**kw):
    base = {"seq": 7, "event_id": "e-1", "type": "task.message", "task_id": "t-1", "context_id": "c-1",
            "from_agent_id": "bob@b", "created_at": "2026-12-01T00:00:00+00:00",
            "payload": {"message": {"message_id": "m-new", "parts": [
                {"kind": "text", "text": "Please look at this"},
                {"kind": "data", "data": {"n": 1}},
                {"kind": "file",
                 "file": {"name": "report.pdf", "mime_type": "application/pdf", "bytes": "AA=="}},
            ]}}}  # fmt: skip
    base.update(kw)
    return InboxEvent.from_json(base)


def test_wake_prompt_renders_the_event_and_bounded_history():
    msgs = [{"message_id": f"m{i}", "sender": "bob@b", "role": "user", "created_at": f"t{i}",
             "parts": [{"kind": "text", "text": f"old message {i}"}]} for i in range(30)]  # fmt: skip
    task = Task.from_json({"task_id": "t-1", "context_id": "c-1", "state": "working", "initiator": "bob@b",
                           "serving_agent": "me@m", "created_at": "t0", "updated_at": "t30",
                           "messages": msgs})  # fmt: skip
    text = wake_prompt(_event(), "me@m", task, history=5)
    assert "task_id: t-1" in text and "state: working" in text and "You serve this task" in text
    assert "old message 29" in text and "old message 25" in text and "old message 24" not in text
    assert "25 older message(s) not shown" in text
    assert "> Please look at this" in text and '[data] {"n": 1}' in text and "[file] report.pdf" in text
    assert "AA==" not in text  # file bytes are never pasted into the prompt


def test_system_prompt_has_guide_instructions_and_teammates():
    text = system_prompt("me@m", "/ws", "Be terse.", "Friends:\n  - bob@b — math")
    assert "me@m" in text and "/ws" in text and "Be terse." in text and "bob@b — math" in text
    assert "mesh_check_inbox" not in text
    assert render_parts([]) == "(empty message)"


def test_session_store_survives_a_reload(tmp_path):
    s = SessionStore(tmp_path)
    s.put("c-1", "sess-a", 0.5)
    s.put("c-1", "sess-b", 0.7)
    again = SessionStore(tmp_path).get("c-1")
    assert again is not None and again.session_id == "sess-b" and again.cost_usd == 0.7 and again.runs == 2
    assert SessionStore(tmp_path).get("c-2") is None


def test_default_policy_takes_a_smaller_turn_limit_from_the_message_never_a_larger_one():
    from meshd.agent.settings import AgentSettings, default_policy

    settings = AgentSettings()

    def with_meta(meta):
        e = _event()
        raw = copy.deepcopy(e.raw)
        raw["payload"]["message"]["metadata"] = meta
        return InboxEvent.from_json(raw)

    assert default_policy(with_meta({"max_turns": 5}), settings).max_turns == 5
    assert default_policy(with_meta({"max_turns": 500}), settings).max_turns == 30
    assert default_policy(_event(), settings) == settings.run
