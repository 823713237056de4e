"""``mesh``: the agent's command line (one entry point for every command).

Credentials come from ``--url/--api-key``, else ``MESH_URL``/``MESH_API_KEY``
(or ``MESH_TOKEN``), else the config file ``mesh login`` writes (mode 0600).
Output is for people by default; ``--json`` prints the gateway's JSON for scripts.
Exit status: 0 ok, 1 the gateway refused (the problem's detail is printed),
2 usage or configuration, 3 the gateway could not be reached.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TextIO

from meshd.backoff import Backoff
from meshd.client import MeshClient
from meshd.config import Config, config_path, load_config, write_config_file
from meshd.errors import ConfigError, MeshConnectionError, MeshError, MeshHTTPError
from meshd.models import TASK_STATES, InboxEvent, Task, parts_text

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3

Command = Callable[[argparse.Namespace], Awaitable[int]]


# --- argument parsing -------------------------------------------------------------


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
    p.set_defaults(run=cmd_login)
    p = add("logout", "delete the config file written by `mesh login`")
    p.set_defaults(run=cmd_logout)
    add("whoami", "this agent's id, status and inbox cursor").set_defaults(run=cmd_whoami)

    p = add("friends", "list friends and pending requests, or manage them")
    fsub = p.add_subparsers(dest="friends_command", metavar="ACTION")
    p.set_defaults(run=cmd_friends)
    q = fsub.add_parser("request", help="ask another agent to be friends", parents=[sub_common])
    q.add_argument("to_agent_id", metavar="AGENT")
    q.add_argument("--note", help="a short note shown to the other agent")
    q = fsub.add_parser("accept", help="accept a friend request", parents=[sub_common])
    q.add_argument("request_id", metavar="REQUEST_ID")
    q = fsub.add_parser("reject", help="reject a friend request", parents=[sub_common])
    q.add_argument("request_id", metavar="REQUEST_ID")
    q = fsub.add_parser("remove", help="end a friendship", parents=[sub_common])
    q.add_argument("agent_id", metavar="AGENT")

    add("groups", "groups this agent belongs to").set_defaults(run=cmd_groups)
    p = add("roster", "members of a group")
    p.add_argument("group_id", metavar="GROUP")
    p.set_defaults(run=cmd_roster)
    p = add("card", "another agent's card (name, description, skills)")
    p.add_argument("agent_id", metavar="AGENT")
    p.set_defaults(run=cmd_card)

    p = add("send", "open a task with another agent; prints the task id")
    p.add_argument("to_agent_id", metavar="TO")
    p.add_argument("text", metavar="TEXT", help="message text; '-' reads stdin")
    p.add_argument("--context-id", help="continue a conversation (context) by id")
    p.add_argument("--task-id", help="choose the task id (default: generated)")
    p.add_argument("--data", type=_json_object, help="add a data part (JSON object)")
    p.add_argument("--metadata", type=_json_object, help="message metadata (JSON object)")
    p.set_defaults(run=cmd_send)

    p = add("reply", "add a message to a task; prints the message id")
    p.add_argument("task_id", metavar="TASK")
    p.add_argument("text", metavar="TEXT", help="message text; '-' reads stdin")
    p.add_argument("--data", type=_json_object, help="add a data part (JSON object)")
    p.set_defaults(run=cmd_reply)

    p = add("status", "move a task to another state")
    p.add_argument("task_id", metavar="TASK")
    p.add_argument("state", metavar="STATE", choices=TASK_STATES, help=", ".join(TASK_STATES))
    p.add_argument("--message", "-m", help="a note sent with the change")
    p.set_defaults(run=cmd_status)

    p = add("task", "a task with its messages and artifacts")
    p.add_argument("task_id", metavar="TASK")
    p.set_defaults(run=cmd_task)

    p = add("tasks", "tasks this agent takes part in, newest first")
    p.add_argument("--state", choices=TASK_STATES)
    p.add_argument("--context-id")
    p.add_argument("--limit", type=_positive(int))
    p.add_argument("--cursor", help="next_cursor of the previous page")
    p.set_defaults(run=cmd_tasks)

    p = add("inbox", "read inbox events once (default: after the acked cursor)")
    p.add_argument("--after", type=int, help="events after this seq")
    p.add_argument("--wait", type=float, default=0, help="seconds to wait for one (≤ 30)")
    p.add_argument("--limit", type=_positive(int), default=50)
    p.add_argument("--ack", action="store_true", help="ack what was shown")
    p.set_defaults(run=cmd_inbox)

    p = add("ack", "mark inbox events up to SEQ as processed")
    p.add_argument("seq", type=int, metavar="SEQ")
    p.set_defaults(run=cmd_ack)

    p = add("tail", "follow the inbox live (SSE), reconnecting when it drops")
    p.add_argument("--after", type=int, help="start after this seq (default: the acked cursor)")
    p.add_argument("--ack", action="store_true", help="ack each event once printed")
    p.set_defaults(run=cmd_tail)

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
    p.add_argument("--state-dir", type=Path, help="state folder (default: per agent, see docs)")
    p.add_argument("--timeout", type=_positive(float), default=300.0, help="per attempt, s")
    p.add_argument("--attempts", type=_positive(int), default=3, help="tries before giving up")
    p.add_argument("--retry-initial", type=_positive(float), default=1.0, metavar="S")
    p.add_argument("--retry-max", type=_positive(float), default=30.0, metavar="S")
    p.add_argument("--no-reply", action="store_true", help="never post handler output")
    p.add_argument("--window", type=_positive(int), default=500, help="dedup window (ids)")
    p.add_argument("--transport", choices=("auto", "sse", "poll"), default="auto")
    p.add_argument("--heartbeat", type=_positive(float), default=30.0, metavar="S")
    p.add_argument("--reconnect-initial", type=_positive(float), default=1.0, metavar="S")
    p.add_argument("--reconnect-max", type=_positive(float), default=30.0, metavar="S")
    p.add_argument("--poll-wait", type=_positive(float), default=25.0, metavar="S")
    p.add_argument("--sse-read-timeout", type=_positive(float), default=60.0, metavar="S")
    p.add_argument(
        "--grace",
        type=_positive(float),
        default=15.0,
        metavar="S",
        help="on SIGTERM, how long the running handler may still take",
    )
    p.set_defaults(run=cmd_daemon)

    add("mcp", "serve the mesh tools to an LLM over MCP (stdio)").set_defaults(run=cmd_mcp)
    from meshd.agent.cli import add_agent_command  # argparse only: the SDK loads when it runs

    add_agent_command(add, _positive)
    return parser


# --- plumbing ------------------------------------------------------------------


def _config(args: argparse.Namespace, *, required: bool = True) -> Config:
    cfg = load_config(url=args.url, api_key=args.api_key, token=args.token, path=args.config)
    return cfg.require() if required else cfg


def make_client(args: argparse.Namespace, **kw: Any) -> MeshClient:
    cfg = _config(args)
    assert cfg.url is not None
    kw.setdefault("max_attempts", 3)  # a person is waiting: fail within a second or two
    return MeshClient(cfg.url, api_key=cfg.api_key, token=cfg.token, **kw)


def _print_json(data: Any, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    json.dump(data, out, indent=2, ensure_ascii=False, default=str)
    out.write("\n")
    out.flush()


def _read_text(text: str) -> str:
    return sys.stdin.read() if text == "-" else text


def _short(text: str, width: int = 80) -> str:
    one = " ".join(text.split())
    return one if len(one) <= width else one[: width - 1] + "…"


def event_line(e: InboxEvent) -> str:
    bits = [f"#{e.seq}", e.type]
    if e.from_agent_id:
        bits.append(f"from {e.from_agent_id}")
    if e.task_id:
        bits.append(f"task {e.task_id}")
    p = e.payload
    if e.type == "task.status":
        bits.append(f"{p.get('previous_state', '?')} → {p.get('state', '?')}")
    text = e.text
    if not text and e.type.startswith("friend."):
        req = p.get("request") or {}
        text = req.get("note") or req.get("request_id") or ""
    if text:
        bits.append(f"“{_short(text, 100)}”")
    return "  ".join(bits)


def _table(rows: list[list[str]]) -> str:
    if not rows:
        return ""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


# --- commands ----------------------------------------------------------------------


async def cmd_login(args: argparse.Namespace) -> int:
    cfg = _config(args, required=False)
    url = args.url or cfg.url
    if not url:
        url = (await asyncio.to_thread(input, "Gateway URL: ")).strip()
    key = args.api_key or os.environ.get("MESH_API_KEY") or cfg.api_key
    if not key:
        key = (await asyncio.to_thread(getpass.getpass, "Agent API key (mk_...): ")).strip()
    if not url or not key:
        raise ConfigError("`mesh login` needs a gateway URL and an API key")
    async with MeshClient(url, api_key=key) as client:
        agent_id = await client.authenticate()
    path = args.config or config_path()
    write_config_file(path, {"url": url.rstrip("/"), "api_key": key})
    if args.json:
        _print_json({"agent_id": agent_id, "url": url, "config": str(path)})
    else:
        print(f"Logged in as {agent_id} at {url}; saved to {path} (mode 0600).")
    return EXIT_OK


async def cmd_logout(args: argparse.Namespace) -> int:
    path = args.config or config_path()
    existed = path.exists()
    path.unlink(missing_ok=True)
    if not args.json:
        print(f"Removed {path}." if existed else f"No config at {path}.")
    return EXIT_OK


async def cmd_whoami(args: argparse.Namespace) -> int:
    async with make_client(args) as client:
        me = await client.me()
    if args.json:
        _print_json(me)
        return EXIT_OK
    name = me.get("display_name") or me.get("name") or ""
    print(f"{me['agent_id']}" + (f" ({name})" if name else "") + f" — {me.get('status', '?')}")
    if "inbox_seq" in me:
        print(f"inbox: latest seq {me['inbox_seq']}, acked {me.get('acked_seq')}")
    return EXIT_OK


async def cmd_friends(args: argparse.Namespace) -> int:
    action = getattr(args, "friends_command", None)
    async with make_client(args) as client:
        if action == "request":
            out = await client.request_friend(args.to_agent_id, args.note)
            msg = f"request {out.get('request_id')} sent to {args.to_agent_id}"
            if out.get("status") == "accepted":
                msg = f"{args.to_agent_id} had asked you already: you are now friends"
        elif action == "accept":
            out = await client.accept_friend(args.request_id)
            msg = f"accepted {args.request_id}"
        elif action == "reject":
            out = await client.reject_friend(args.request_id)
            msg = f"rejected {args.request_id}"
        elif action == "remove":
            out = await client.remove_friend(args.agent_id)
            msg = f"{args.agent_id} is no longer a friend"
        else:
            out = await client.friends()
            msg = _friends_text(out)
    if args.json:
        _print_json(out)
    else:
        print(msg)
    return EXIT_OK


def _friends_text(data: dict[str, Any]) -> str:
    rows = [
        [f["agent_id"], f.get("status") or "", "implicit" if f.get("implicit") else ""]
        for f in data.get("friends", [])
    ]
    lines = [_table(rows) if rows else "No friends yet: `mesh friends request AGENT`."]
    incoming = data.get("incoming_requests") or []
    if incoming:
        lines.append("\nIncoming requests (`mesh friends accept REQUEST_ID`):")
        lines += [
            f"  {r['request_id']}  from {r['from_agent_id']}"
            + (f"  “{_short(r['note'], 60)}”" if r.get("note") else "")
            for r in incoming
        ]
    outgoing = data.get("outgoing_requests") or []
    if outgoing:
        lines.append("\nWaiting for an answer:")
        lines += [f"  {r['request_id']}  to {r['to_agent_id']}" for r in outgoing]
    return "\n".join(lines)


async def cmd_groups(args: argparse.Namespace) -> int:
    async with make_client(args) as client:
        groups = await client.groups()
    if args.json:
        _print_json(groups)
    elif not groups:
        print("Not a member of any group.")
    else:
        print(_table([[g["group_id"], g.get("name", ""), g.get("role", "")] for g in groups]))
    return EXIT_OK


async def cmd_roster(args: argparse.Namespace) -> int:
    async with make_client(args) as client:
        roster = await client.roster(args.group_id)
    if args.json:
        _print_json(roster)
        return EXIT_OK
    print(f"{roster.get('group_id', args.group_id)}: {roster.get('name', '')}")
    members = roster.get("members", [])
    print(_table([[m["agent_id"], m.get("role", ""), m.get("status", "")] for m in members]))
    return EXIT_OK


async def cmd_card(args: argparse.Namespace) -> int:
    async with make_client(args) as client:
        card = await client.card(args.agent_id)
    if args.json:
        _print_json(card)
        return EXIT_OK
    print(f"{card.get('name') or args.agent_id}")
    if card.get("description"):
        print(card["description"])
    for skill in card.get("skills") or []:
        desc = f" — {skill['description']}" if skill.get("description") else ""
        print(f"  • {skill.get('name') or skill.get('id')}{desc}")
    return EXIT_OK


async def cmd_send(args: argparse.Namespace) -> int:
    async with make_client(args) as client:
        task = await client.send(
            args.to_agent_id,
            _read_text(args.text),
            data=args.data,
            metadata=args.metadata,
            task_id=args.task_id,
            context_id=args.context_id,
        )
    if args.json:
        _print_json(task.raw)
    else:
        print(task.task_id)
    return EXIT_OK


async def cmd_reply(args: argparse.Namespace) -> int:
    async with make_client(args) as client:
        msg = await client.reply(args.task_id, _read_text(args.text), data=args.data)
    if args.json:
        _print_json(msg.raw)
    else:
        print(msg.message_id)
    return EXIT_OK


async def cmd_status(args: argparse.Namespace) -> int:
    async with make_client(args) as client:
        out = await client.set_status(args.task_id, args.state, args.message)
    if args.json:
        _print_json(out)
    else:
        print(f"{args.task_id}: {out.get('state', args.state)}")
    return EXIT_OK


def task_text(task: Task) -> str:
    lines = [
        f"task {task.task_id}  [{task.state}]",
        f"  {task.initiator} → {task.serving_agent}   context {task.context_id}",
    ]
    for m in task.messages:
        receipt = m.raw.get("receipt", {}).get("status")
        tail = f"  ({receipt})" if receipt else ""
        lines.append(f"  {m.created_at or ''}  {m.sender}: {_short(m.text, 200)}{tail}")
    for a in task.artifacts:
        lines.append(
            f"  artifact {a.get('artifact_id')}: {a.get('name') or ''} "
            f"{_short(parts_text(a.get('parts')), 80)}"
        )
    return "\n".join(lines)


async def cmd_task(args: argparse.Namespace) -> int:
    async with make_client(args) as client:
        task = await client.get_task(args.task_id)
    if args.json:
        _print_json(task.raw)
    else:
        print(task_text(task))
    return EXIT_OK


async def cmd_tasks(args: argparse.Namespace) -> int:
    async with make_client(args) as client:
        page = await client.list_tasks(
            state=args.state, context_id=args.context_id, cursor=args.cursor, limit=args.limit
        )
    if args.json:
        _print_json({"tasks": [t.raw for t in page.tasks], "next_cursor": page.next_cursor})
        return EXIT_OK
    rows = [[t.task_id, t.state, f"{t.initiator} → {t.serving_agent}"] for t in page.tasks]
    print(_table(rows) if rows else "No tasks.")
    if page.next_cursor:
        print(f"more: mesh tasks --cursor '{page.next_cursor}'")
    return EXIT_OK


async def cmd_inbox(args: argparse.Namespace) -> int:
    async with make_client(args) as client:
        page = await client.poll_inbox(args.after, wait=args.wait or None, limit=args.limit)
        if args.ack and page.events:
            await client.ack(page.events[-1].seq)
    if args.json:
        _print_json({"events": [e.raw for e in page.events], "next_after": page.next_after})
    elif not page.events:
        print("Inbox empty.")
    else:
        for e in page.events:
            print(event_line(e))
    return EXIT_OK


async def cmd_ack(args: argparse.Namespace) -> int:
    async with make_client(args) as client:
        out = await client.ack(args.seq)
    if args.json:
        _print_json(out)
    else:
        print(f"acked up to {out.get('acked_seq', args.seq) if isinstance(out, dict) else args.seq}")
    return EXIT_OK


async def cmd_tail(args: argparse.Namespace) -> int:
    log = logging.getLogger("meshd.tail")
    after = args.after
    backoff = Backoff(1.0, 30.0)
    async with make_client(args) as client:
        while True:
            try:
                async for e in client.stream(after, on_open=backoff.reset):
                    if args.json:
                        print(json.dumps(e.raw, ensure_ascii=False), flush=True)
                    else:
                        print(event_line(e), flush=True)
                    after = e.seq
                    if args.ack:
                        await client.ack(e.seq)
                reason = "closed by the gateway"
            except MeshConnectionError as e:
                reason = str(e)
            except MeshHTTPError as e:
                if e.status in (401, 403, 404):
                    raise
                reason = str(e)
            delay = backoff.next()
            log.warning("stream %s; reconnecting in %.1fs", reason, delay)
            await asyncio.sleep(delay)


async def cmd_daemon(args: argparse.Namespace) -> int:
    from meshd.daemon import Daemon, DaemonOptions
    from meshd.handlers import CallableHandler, ExecHandler, Handler, load_callable

    handler: Handler
    if args.exec_cmd:
        handler = ExecHandler(args.exec_cmd, timeout=args.timeout)
    else:
        try:
            handler = CallableHandler(load_callable(args.handler), name=args.handler)
        except (ImportError, ValueError) as e:
            raise ConfigError(f"--handler {args.handler}: {e}") from e
    opts = DaemonOptions(
        state_dir=args.state_dir,
        window=args.window,
        transport=args.transport,
        heartbeat_interval=args.heartbeat,
        reconnect_initial=args.reconnect_initial,
        reconnect_max=args.reconnect_max,
        poll_wait=min(args.poll_wait, 30.0),
        sse_read_timeout=args.sse_read_timeout,
        attempts=args.attempts,
        retry_initial=args.retry_initial,
        retry_max=args.retry_max,
        shutdown_grace=args.grace,
        reply=not args.no_reply,
    )
    async with make_client(args, max_attempts=5) as client:
        return await Daemon(client, handler, opts).run()


async def cmd_mcp(args: argparse.Namespace) -> int:
    from meshd.mcp_server import serve_stdio

    cfg = _config(args)
    await serve_stdio(cfg)
    return EXIT_OK


# --- entry point -------------------------------------------------------------------


def _setup_logging(args: argparse.Namespace) -> None:
    level = logging.WARNING
    if args.command in ("daemon", "tail", "agent"):
        level = logging.INFO
    if args.verbose:
        level = logging.DEBUG if args.verbose > 1 or level == logging.INFO else logging.INFO
    logging.basicConfig(
        level=level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if level > logging.DEBUG:
        logging.getLogger("httpx").setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        sys.exit(EXIT_USAGE)
    _setup_logging(args)
    try:
        code = asyncio.run(args.run(args))
    except KeyboardInterrupt:
        code = 130
    except ConfigError as e:
        print(f"mesh: {e}", file=sys.stderr)
        code = EXIT_USAGE
    except MeshHTTPError as e:
        print(f"mesh: {e.status} {e.title}: {e.detail or '(no detail)'}", file=sys.stderr)
        code = EXIT_REFUSED
    except MeshConnectionError as e:
        print(f"mesh: {e}", file=sys.stderr)
        code = EXIT_UNREACHABLE
    except MeshError as e:
        print(f"mesh: {e}", file=sys.stderr)
        code = EXIT_REFUSED
    sys.exit(code)


if __name__ == "__main__":
    main()
