"""``mesh``'s arguments: one parser, every command, and the daemon's defaults from :class:`DaemonOptions`."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

from meshd.cli import run, social, tasks
from meshd.handlers import DEFAULT_TIMEOUT
from meshd.options import DaemonOptions, Transport
from meshd.task_states import STATES


def _common(suppress: bool) -> argparse.ArgumentParser:
    """Options accepted both before and after the command name."""
    d = argparse.SUPPRESS if suppress else None
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("connection")
    g.add_argument("--url", default=d, help="gateway base URL (env MESH_URL)")
    g.add_argument("--api-key", default=d, help="agent API key mk_... (env MESH_API_KEY)")
    g.add_argument("--token", default=d, help="a bearer token used as-is, e.g. an owner login (MESH_TOKEN)")
    g.add_argument("--config", default=d, type=Path, help="config file (env MESH_CONFIG)")
    p.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS if suppress else False,
        help="print JSON for scripts",
    )
    p.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=argparse.SUPPRESS if suppress else 0,
        help="more logging on stderr",
    )
    return p


def _positive(kind: type[float] | type[int]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be greater than 0: {text!r}")
        return value

    return parse


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object, e.g. '{\"k\": 1}'")
    return value


def build_parser() -> argparse.ArgumentParser:
    sub_common = _common(suppress=True)
    parser = argparse.ArgumentParser(
        prog="mesh",
        description="Put an agent on the Agent Mesh: messages, tasks, inbox, daemon, MCP.",
        parents=[_common(suppress=False)],
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, help: str, **kw: Any) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=help, parents=[sub_common], **kw)

    p = add("login", "check an API key and save it (with the URL) to the config file, mode 0600")
    p.set_defaults(run=social.cmd_login)
    p = add("logout", "delete the config file written by `mesh login`")
    p.set_defaults(run=social.cmd_logout)
    add("whoami", "this agent's id, status and inbox cursor").set_defaults(run=social.cmd_whoami)

    p = add("friends", "list friends and pending requests, or manage them")
    fsub = p.add_subparsers(dest="friends_command", metavar="ACTION")
    p.set_defaults(run=social.cmd_friends)
    q = fsub.add_parser("request", help="ask another agent to be friends", parents=[sub_common])
    q.add_argument("to_agent_id", metavar="AGENT")
    q.add_argument("--note", help="a short note shown to the other agent")
    q = fsub.add_parser("accept", help="accept a friend request", parents=[sub_common])
    q.add_argument("request_id", metavar="REQUEST_ID")
    q = fsub.add_parser("reject", help="reject a friend request", parents=[sub_common])
    q.add_argument("request_id", metavar="REQUEST_ID")
    q = fsub.add_parser("remove", help="end a friendship", parents=[sub_common])
    q.add_argument("agent_id", metavar="AGENT")

    add("groups", "groups this agent belongs to").set_defaults(run=social.cmd_groups)
    p = add("roster", "members of a group")
    p.add_argument("group_id", metavar="GROUP")
    p.set_defaults(run=social.cmd_roster)
    p = add("card", "another agent's card (name, description, skills)")
    p.add_argument("agent_id", metavar="AGENT")
    p.set_defaults(run=social.cmd_card)

    p = add("send", "open a task with another agent; prints the task id")
    p.add_argument("to_agent_id", metavar="TO")
    p.add_argument("text", metavar="TEXT", help="message text; '-' reads stdin")
    p.add_argument("--context-id", help="continue a conversation (context) by id")
    p.add_argument("--task-id", help="choose the task id (default: generated)")
    p.add_argument("--data", type=_json_object, help="add a data part (JSON object)")
    p.add_argument("--metadata", type=_json_object, help="message metadata (JSON object)")
    p.set_defaults(run=tasks.cmd_send)

    p = add("reply", "add a message to a task; prints the message id")
    p.add_argument("task_id", metavar="TASK")
    p.add_argument("text", metavar="TEXT", help="message text; '-' reads stdin")
    p.add_argument("--data", type=_json_object, help="add a data part (JSON object)")
    p.set_defaults(run=tasks.cmd_reply)

    p = add("status", "move a task to another state")
    p.add_argument("task_id", metavar="TASK")
    p.add_argument("state", metavar="STATE", choices=STATES, help=", ".join(STATES))
    p.add_argument("--message", "-m", help="a note sent with the change")
    p.set_defaults(run=tasks.cmd_status)

    p = add("task", "a task with its messages and artifacts")
    p.add_argument("task_id", metavar="TASK")
    p.set_defaults(run=tasks.cmd_task)

    p = add("tasks", "tasks this agent takes part in, newest first")
    p.add_argument("--state", choices=STATES)
    p.add_argument("--context-id")
    p.add_argument("--limit", type=_positive(int))
    p.add_argument("--cursor", help="next_cursor of the previous page")
    p.set_defaults(run=tasks.cmd_tasks)

    p = add("inbox", "read inbox events once (default: after the acked cursor)")
    p.add_argument("--after", type=int, help="events after this seq")
    p.add_argument("--wait", type=float, default=0, help="seconds to wait for one (≤ 30)")
    p.add_argument("--limit", type=_positive(int), default=50)
    p.add_argument("--ack", action="store_true", help="ack what was shown")
    p.set_defaults(run=tasks.cmd_inbox)

    p = add("ack", "mark inbox events up to SEQ as processed")
    p.add_argument("seq", type=int, metavar="SEQ")
    p.set_defaults(run=tasks.cmd_ack)

    p = add("tail", "follow the inbox live (SSE), reconnecting when it drops")
    p.add_argument("--after", type=int, help="start after this seq (default: the acked cursor)")
    p.add_argument("--ack", action="store_true", help="ack each event once printed")
    p.set_defaults(run=tasks.cmd_tail)

    p = add(
        "daemon",
        "run a handler for every inbox event, in order and once (see docs/meshd.md)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "--exec: the event JSON is on stdin; stdout (if any) becomes the reply on\n"
            "that task; a non-zero exit fails the attempt. Environment: MESH_EVENT_TYPE,\n"
            "MESH_TASK_ID, MESH_CONTEXT_ID, MESH_FROM_AGENT_ID, MESH_SEQ, MESH_EVENT_ID."
        ),
    )
    h = p.add_mutually_exclusive_group(required=True)
    h.add_argument("--exec", dest="exec_cmd", metavar="CMD", help="shell command per event")
    h.add_argument("--handler", metavar="MODULE:FUNCTION", help="Python callable per event")
    d = DaemonOptions()
    p.add_argument("--state-dir", type=Path, help="state folder (default: per agent, see docs)")
    p.add_argument("--timeout", type=_positive(float), default=DEFAULT_TIMEOUT, help="per attempt, s")
    p.add_argument("--attempts", type=_positive(int), default=d.attempts, help="tries before giving up")
    p.add_argument("--retry-initial", type=_positive(float), default=d.retry_initial, metavar="S")
    p.add_argument("--retry-max", type=_positive(float), default=d.retry_max, metavar="S")
    p.add_argument("--no-reply", action="store_true", help="never post handler output")
    p.add_argument("--window", type=_positive(int), default=d.window, help="dedup window (ids)")
    p.add_argument("--transport", choices=get_args(Transport), default=d.transport)
    p.add_argument("--heartbeat", type=_positive(float), default=d.heartbeat_interval, metavar="S")
    p.add_argument("--reconnect-initial", type=_positive(float), default=d.reconnect_initial, metavar="S")
    p.add_argument("--reconnect-max", type=_positive(float), default=d.reconnect_max, metavar="S")
    p.add_argument("--poll-wait", type=_positive(float), default=d.poll_wait, metavar="S")
    p.add_argument("--sse-read-timeout", type=_positive(float), default=d.sse_read_timeout, metavar="S")
    p.add_argument(
        "--grace",
        type=_positive(float),
        default=d.shutdown_grace,
        metavar="S",
        help="on SIGTERM, how long the running handler may still take",
    )
    p.set_defaults(run=run.cmd_daemon)

    add("mcp", "serve the mesh tools to an LLM over MCP (stdio)").set_defaults(run=run.cmd_mcp)
    return parser
