"""Commands about who is who: login/logout, whoami, friends, groups, rosters, cards."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import sys
from typing import Any

from meshd.cli.common import EXIT_OK, cli_config, make_client, print_json, short, table
from meshd.client import MeshClient
from meshd.config import config_path, gateway_url, read_config_file, save_login
from meshd.errors import ConfigError

NO_TTY_HINT = (
    "pass the URL and key another way: `mesh login --url URL --api-key-stdin` with the key on stdin "
    "(e.g. printf %s \"$KEY\" | mesh login --url URL --api-key-stdin), or set MESH_URL and MESH_API_KEY"
)


def _ask(prompt: str, what: str, *, secret: bool) -> str:
    """Read from the terminal; without one (a script, CI) say how to pass the value instead."""
    if not sys.stdin.isatty():
        raise ConfigError(f"`mesh login` has no terminal to ask for {what}; {NO_TTY_HINT}")
    try:
        return (getpass.getpass(f"{prompt}: ") if secret else input(f"{prompt}: ")).strip()
    except EOFError:
        raise ConfigError(f"no {what} given; {NO_TTY_HINT}") from None


async def cmd_login(args: argparse.Namespace) -> int:
    cfg = cli_config(args, required=False)
    url = cfg.url if args.url is None else gateway_url(args.url)
    if getattr(args, "api_key_stdin", False):
        if args.api_key:
            raise ConfigError("give the key with --api-key or --api-key-stdin, not both")
        key = (await asyncio.to_thread(sys.stdin.readline)).strip()
        if not key:
            raise ConfigError("--api-key-stdin: stdin held no key (one line, mk_...)")
    else:
        key = args.api_key or os.environ.get("MESH_API_KEY") or cfg.api_key
    if not url:
        url = gateway_url(await asyncio.to_thread(_ask, "Gateway URL", "the gateway URL", secret=False))
    if not key:
        key = await asyncio.to_thread(_ask, "Agent API key (mk_...)", "the API key", secret=True)
    if not url or not key:
        raise ConfigError("`mesh login` needs a gateway URL and an API key")
    async with MeshClient(url, api_key=key) as client:
        agent_id = await client.authenticate()
    path = args.config or config_path()
    where = save_login(path, url, agent_id, key, keyring=args.keyring)
    if args.json:
        print_json({"agent_id": agent_id, "url": url, "config": str(path), "keyring": args.keyring})
    else:
        print(f"Logged in as {agent_id} at {url}; saved to {where}.")
    return EXIT_OK


async def cmd_logout(args: argparse.Namespace) -> int:
    path = args.config or config_path()
    existed = path.exists()
    account = read_config_file(path).get("keyring") if existed else None
    if account:
        from meshd.keyring_store import delete_key

        delete_key(account)
    path.unlink(missing_ok=True)
    if not args.json:
        print(f"Removed {path}." if existed else f"No config at {path}.")
    return EXIT_OK


async def cmd_whoami(args: argparse.Namespace) -> int:
    async with make_client(args) as client:
        me = await client.me()
    if args.json:
        print_json(me)
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
        print_json(out)
    else:
        print(msg)
    return EXIT_OK


def _friends_text(data: dict[str, Any]) -> str:
    rows = [
        [f["agent_id"], f.get("status") or "", "implicit" if f.get("implicit") else ""]
        for f in data.get("friends", [])
    ]
    lines = [table(rows) if rows else "No friends yet: `mesh friends request AGENT`."]
    incoming = data.get("incoming_requests") or []
    if incoming:
        lines.append("\nIncoming requests (`mesh friends accept REQUEST_ID`):")
        lines += [
            f"  {r['request_id']}  from {r['from_agent_id']}"
            + (f"  “{short(r['note'], 60)}”" if r.get("note") else "")
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
        print_json(groups)
    elif not groups:
        print("Not a member of any group.")
    else:
        print(table([[g["group_id"], g.get("name", ""), g.get("role", "")] for g in groups]))
    return EXIT_OK


async def cmd_roster(args: argparse.Namespace) -> int:
    async with make_client(args) as client:
        roster = await client.roster(args.group_id)
    if args.json:
        print_json(roster)
        return EXIT_OK
    print(f"{roster.get('group_id', args.group_id)}: {roster.get('name', '')}")
    members = roster.get("members", [])
    print(table([[m["agent_id"], m.get("role", ""), m.get("status", "")] for m in members]))
    return EXIT_OK


async def cmd_card(args: argparse.Namespace) -> int:
    async with make_client(args) as client:
        card = await client.card(args.agent_id)
    if args.json:
        print_json(card)
        return EXIT_OK
    print(f"{card.get('name') or args.agent_id}")
    if card.get("description"):
        print(card["description"])
    for skill in card.get("skills") or []:
        desc = f" — {skill['description']}" if skill.get("description") else ""
        print(f"  • {skill.get('name') or skill.get('id')}{desc}")
    return EXIT_OK
