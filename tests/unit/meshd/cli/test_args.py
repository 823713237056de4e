import pytest

from meshd.cli import build_parser, event_line
from meshd.models import InboxEvent


def parse(*argv):
    return build_parser().parse_args(list(argv))


def test_global_options_before_or_after_the_command():
    a = parse("--json", "--url", "http://x", "whoami")
    assert a.json and a.url == "http://x" and a.command == "whoami"
    b = parse("whoami", "--json", "--url", "http://y")
    assert b.json and b.url == "http://y"
    c = parse("whoami")
    assert not c.json and c.url is None and c.verbose == 0


def test_send_reply_status():
    a = parse("send", "coder@bob", "review PR 12", "--data", '{"pr": 12}')
    assert (a.to_agent_id, a.text, a.data) == ("coder@bob", "review PR 12", {"pr": 12})
    assert parse("reply", "t-1", "-").text == "-"
    assert parse("status", "t-1", "completed", "-m", "done").message == "done"
    with pytest.raises(SystemExit):
        parse("status", "t-1", "finished")
    with pytest.raises(SystemExit):
        parse("send", "x@y", "t", "--data", "[1]")


def test_friends_actions():
    assert parse("friends").friends_command is None
    a = parse("friends", "request", "b@c", "--note", "hi")
    assert (a.friends_command, a.to_agent_id, a.note) == ("request", "b@c", "hi")
    assert parse("friends", "accept", "fr-1").request_id == "fr-1"


def test_daemon_needs_exactly_one_handler_and_sane_numbers():
    a = parse("daemon", "--exec", "llm", "--timeout", "5", "--transport", "poll")
    assert (a.exec_cmd, a.handler, a.timeout, a.transport) == ("llm", None, 5.0, "poll")
    assert a.attempts == 3 and a.window == 500 and a.heartbeat == 30.0
    with pytest.raises(SystemExit):
        parse("daemon")
    with pytest.raises(SystemExit):
        parse("daemon", "--exec", "x", "--handler", "m:f")
    with pytest.raises(SystemExit):
        parse("daemon", "--exec", "x", "--timeout", "0")


def test_agent_has_the_daemon_delivery_options_and_its_own_limits():
    from meshd.agent.settings import AGENT_ATTEMPTS, RunSettings
    from meshd.options import DaemonOptions

    a = parse("agent", "--max-turns", "3", "--run-on", "task.created, group.message", "--transport", "sse")
    r = RunSettings()
    assert (a.max_turns, a.max_budget_usd, a.timeout) == (3, r.max_budget_usd, r.timeout)
    assert a.run_on == ("task.created", "group.message") and a.transport == "sse"
    d = DaemonOptions()
    assert a.attempts == AGENT_ATTEMPTS == 2 and a.window == d.window and a.heartbeat == d.heartbeat_interval
    assert (a.poll_wait, a.sse_read_timeout, a.grace) == (d.poll_wait, d.sse_read_timeout, d.shutdown_grace)
    with pytest.raises(SystemExit):
        parse("agent", "--max-budget-usd", "0")


def test_event_line_is_readable():
    e = InboxEvent.from_json(
        {
            "seq": 3,
            "event_id": "e",
            "type": "task.status",
            "task_id": "t-1",
            "from_agent_id": "a@b",
            "created_at": "2026-11-30T10:00:00+00:00",
            "payload": {"state": "working", "previous_state": "submitted"},
        }
    )
    assert event_line(e) == "#3  task.status  from a@b  task t-1  submitted → working"
