"""``mesh``'s arguments: one parser, every command, and the daemon's defaults from :class:`DaemonOptions`.

``mesh agent`` takes its per-run defaults from :mod:`meshd.agent.settings` (no SDK
import: the Claude Agent SDK is loaded only when the command runs).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, get_args

from meshd.agent.policies.config import PolicyConfig
from meshd.agent.settings import AGENT_ATTEMPTS, DEFAULT_RUN_ON, DEFAULT_TOOLS, AgentSettings, RunSettings
from meshd.cli import run, social, tasks, teams, up
from meshd.daemon.handlers import DEFAULT_TIMEOUT
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


def _csv(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _delivery(
    p: argparse.ArgumentParser | argparse._ArgumentGroup, d: DaemonOptions, *, attempts: str, grace: str
) -> None:
    """The daemon's delivery options (state, retries, transport, presence), shared with `mesh agent`."""
    p.add_argument("--state-dir", type=Path, help="state folder (default: per agent, see docs)")
    p.add_argument("--attempts", type=_positive(int), default=d.attempts, help=attempts)
    p.add_argument("--retry-initial", type=_positive(float), default=d.retry_initial, metavar="S")
    p.add_argument("--retry-max", type=_positive(float), default=d.retry_max, metavar="S")
    p.add_argument("--window", type=_positive(int), default=d.window, help="dedup window (ids)")
    p.add_argument("--transport", choices=get_args(Transport), default=d.transport)
    p.add_argument("--heartbeat", type=_positive(float), default=d.heartbeat_interval, metavar="S")
    p.add_argument("--reconnect-initial", type=_positive(float), default=d.reconnect_initial, metavar="S")
    p.add_argument("--reconnect-max", type=_positive(float), default=d.reconnect_max, metavar="S")
    p.add_argument("--poll-wait", type=_positive(float), default=d.poll_wait, metavar="S")
    p.add_argument("--sse-read-timeout", type=_positive(float), default=d.sse_read_timeout, metavar="S")
    p.add_argument("--grace", type=_positive(float), default=d.shutdown_grace, metavar="S", help=grace)


AGENT_EPILOG = """\
Runs the Claude Agent SDK (with its bundled Claude Code CLI) once per inbox event
that needs thought, behind the same delivery loop as `mesh daemon`. Install with
pip install './meshd[claude]' from a checkout of the repository. The model's credentials come from the
environment as the SDK expects (ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, ...).

Per event: at most --max-turns turns, --max-budget-usd dollars and --timeout
seconds; a run that hits one is not retried, its task gets a note and is set
failed. Defaults: no shell, no web, file tools inside --workspace only.
See docs/meshd.md, "Claude as a mesh agent".
"""


def _agent(p: argparse.ArgumentParser) -> None:
    r, a = RunSettings(), AgentSettings()
    g = p.add_argument_group("limits per event (never retried past one)")
    g.add_argument("--max-turns", type=_positive(int), default=r.max_turns,
                   help=f"model turns (default {r.max_turns})")  # fmt: skip
    g.add_argument("--max-budget-usd", type=_positive(float), default=r.max_budget_usd,
                   help=f"USD (default {r.max_budget_usd:g})")  # fmt: skip
    g.add_argument("--timeout", type=_positive(float), default=r.timeout, metavar="S",
                   help=f"wall clock, seconds (default {r.timeout:g})")  # fmt: skip
    g = p.add_argument_group("model and permissions")
    g.add_argument("--workspace", type=Path, help="the run's cwd (default: STATE_DIR/workspace)")
    g.add_argument("--model", help="model name (default: the CLI's default)")
    g.add_argument("--effort", choices=("low", "medium", "high", "xhigh", "max"))
    g.add_argument("--tools", type=_csv, default=DEFAULT_TOOLS, metavar="LIST",
                   help=f"built-in tools offered (default {','.join(DEFAULT_TOOLS)})")  # fmt: skip
    g.add_argument("--allow-tool", action="append", default=[], metavar="NAME",
                   help="also offer this built-in tool, e.g. Bash (repeatable; think first)")  # fmt: skip
    g.add_argument("--add-dir", action="append", type=Path, default=[], metavar="DIR",
                   help="another folder the file tools may use (repeatable)")  # fmt: skip
    g = p.add_argument_group("behaviour")
    g.add_argument("--run-on", type=_csv, default=DEFAULT_RUN_ON, metavar="TYPES",
                   help=f"event types that start a run (default {','.join(DEFAULT_RUN_ON)})")  # fmt: skip
    g.add_argument("--no-auto-reply", action="store_true",
                   help="do not post a run's final text when it posted nothing")  # fmt: skip
    g.add_argument("--no-auto-complete", action="store_true",
                   help="leave a served task open when a run answered it and set no state")  # fmt: skip
    g.add_argument("--history", type=_positive(int), default=a.history, help="earlier task messages shown")
    g.add_argument("--cli-path", help="a Claude Code CLI to use instead of the bundled one")
    g.add_argument("--skip-model-check", action="store_true",
                   help="start without checking the model API's URL and credentials")  # fmt: skip
    _policies(p.add_argument_group('collaboration policies (docs/meshd.md, "Policies")'))
    _delivery(
        p.add_argument_group("delivery (as for `mesh daemon`)"),
        replace(DaemonOptions(), attempts=AGENT_ATTEMPTS),
        attempts="tries of a run that failed with an error (not a limit)",
        grace="on SIGTERM, how long the running run may still take",
    )


def _policies(g: argparse._ArgumentGroup) -> None:
    c = PolicyConfig()
    g.add_argument("--broadcast-max-turns", type=_positive(int), default=c.broadcast_max_turns,
                   help=f"turns of a run started by a group message (default {c.broadcast_max_turns})")
    g.add_argument("--broadcast-max-budget-usd", type=_positive(float), default=c.broadcast_max_budget_usd,
                   help=f"USD of a group message's run (default {c.broadcast_max_budget_usd:g})")
    g.add_argument("--no-plans", action="store_true", help="do not ask high tasks for a {task}.plan.md")
    g.add_argument("--no-notes", action="store_true",
                   help="keep no notes/<peer>/*.md in the workspace and the system prompt")  # fmt: skip
    g.add_argument("--check", action="append", default=[], metavar="CMD",
                   help="a build/test command of the workspace the runtime re-runs to verify a reply "
                   "(repeatable; run with the shell in a bubblewrap sandbox: the workspace writable, "
                   "no network, no secrets)")  # fmt: skip
    g.add_argument("--unsafe-check", action="store_true",
                   help="run the checks unsandboxed when bubblewrap (bwrap) is not installed")  # fmt: skip
    g.add_argument("--check-timeout", type=_positive(float), default=c.check_timeout, metavar="S",
                   help=f"seconds per re-run check (default {c.check_timeout:g})")  # fmt: skip
    g.add_argument(
        "--no-complexity",
        action="store_true",
        help="one effort/thinking for every task instead of one per complexity level",
    )
    g.add_argument(
        "--handshake",
        choices=("auto", "always", "off"),
        default=c.handshake,
        help="confirm understanding before medium/high work (auto: the sender may waive it)",
    )
    g.add_argument(
        "--loop-limit",
        type=_positive(int),
        default=c.loop_limit,
        help=f"identical tool calls in a row: warned, then stopped (default {c.loop_limit})",
    )
    g.add_argument(
        "--max-tool-calls",
        type=_positive(int),
        default=c.max_tool_calls,
        help=f"tool calls per run before it is stopped (default {c.max_tool_calls})",
    )
    g.add_argument(
        "--tool-failures",
        type=_positive(int),
        default=c.tool_failures,
        help=f"a mesh tool failing this often in a row is switched off (default {c.tool_failures})",
    )
    g.add_argument(
        "--failed-runs",
        type=_positive(int),
        default=c.failed_runs,
        help=f"failed runs in a row before a context gets no more (default {c.failed_runs})",
    )
    g.add_argument(
        "--chit-chat",
        type=_positive(int),
        default=c.chit_chat,
        help=f"acknowledgements in a row before the task is closed (default {c.chit_chat})",
    )


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
    p.add_argument("--api-key-stdin", action="store_true",
                   help="read the key from stdin (one line) instead of a prompt: for scripts")  # fmt: skip
    p.add_argument("--keyring", action="store_true",
                   help="keep the key in the OS keyring; the config file then holds no secret")  # fmt: skip
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
    p.add_argument("--complexity", choices=("low", "medium", "high"),
                   help="how complex the request is (default: the receiving agent infers it)")  # fmt: skip
    p.add_argument("--no-handshake", action="store_true",
                   help="let the receiver start without confirming its understanding")  # fmt: skip
    p.set_defaults(run=tasks.cmd_send)

    p = add("reply", "add a message to a task; prints the message id")
    p.add_argument("task_id", metavar="TASK")
    p.add_argument("text", metavar="TEXT", help="message text; '-' reads stdin")
    p.add_argument("--data", type=_json_object, help="add a data part (JSON object)")
    p.set_defaults(run=tasks.cmd_reply)

    p = add("status", "the agents of a `mesh up` FILE (default mesh.toml), or: move TASK to STATE",
            usage="mesh status [FILE]  |  mesh status TASK STATE [-m NOTE]")  # fmt: skip
    p.add_argument("task_id", metavar="FILE|TASK", nargs="?", help="a `mesh up` file, or a task id")
    p.add_argument("state", metavar="STATE", nargs="?", choices=STATES, help=", ".join(STATES))
    p.add_argument("--message", "-m", help="a note sent with the change")
    p.set_defaults(run=up.cmd_status)

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

    p = add("notify-group", "post a message to a group; every other member gets it")
    p.add_argument("group_id", metavar="GROUP")
    p.add_argument("text", metavar="TEXT", help="message text; '-' reads stdin")
    p.add_argument("--data", type=_json_object, help="add a data part (JSON object)")
    p.set_defaults(run=teams.cmd_notify_group)

    p = add("broadcast", "ask several agents the same thing and wait for enough answers; "
            "with --show, a broadcast's progress")
    p.add_argument("text", metavar="TEXT", nargs="?", help="message text; '-' reads stdin")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--to", type=_csv, help="recipients, comma-separated agent ids")
    who.add_argument("--group", help="every other member of this group")
    who.add_argument("--show", dest="broadcast_id", metavar="BROADCAST_ID",
                     help="show a broadcast you sent")
    p.add_argument("--policy", choices=["all", "any", "n"], default="all",
                   help="how many must complete: all, any (one), n (see --n)")
    p.add_argument("--n", type=_positive(int), help="with --policy n")
    p.add_argument("--timeout", type=_positive(int), default=300, help="seconds to wait")
    p.set_defaults(run=teams.cmd_broadcast)

    p = add("timeline", "a context's tasks, messages, state changes and artifacts, in order")
    p.add_argument("context_id", metavar="CONTEXT")
    p.add_argument("--limit", type=_positive(int))
    p.add_argument("--cursor", help="next_cursor of the previous page")
    p.set_defaults(run=teams.cmd_timeline)

    p = add("directory", "search listed agents by words and skill")
    p.add_argument("q", metavar="WORDS", nargs="?", default="")
    p.add_argument("--skill", help="a skill id, name or tag")
    p.add_argument("--limit", type=_positive(int))
    p.add_argument("--cursor", help="next_cursor of the previous page")
    p.set_defaults(run=teams.cmd_directory)

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
    p.add_argument("--timeout", type=_positive(float), default=DEFAULT_TIMEOUT, help="per attempt, s")
    p.add_argument("--no-reply", action="store_true", help="never post handler output")
    _delivery(
        p,
        DaemonOptions(),
        attempts="tries before giving up",
        grace="on SIGTERM, how long the running handler may still take",
    )
    p.set_defaults(run=run.cmd_daemon)

    p = add("up", "run the agents of a TOML FILE, each its own process, restarted when it dies "
            "(see docs/meshd.md)")  # fmt: skip
    p.add_argument("file", metavar="FILE", type=Path)
    p.add_argument("--check", action="store_true", help="only check the file and say what would run")
    p.set_defaults(run=up.cmd_up)

    add("mcp", "serve the mesh tools to an LLM over MCP (stdio)").set_defaults(run=run.cmd_mcp)

    p = add(
        "agent",
        "run an LLM (Claude Agent SDK) for every inbox event that needs thought",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=AGENT_EPILOG,
    )
    _agent(p)
    p.set_defaults(run=run.cmd_agent)
    return parser
