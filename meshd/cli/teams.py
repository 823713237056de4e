"""Commands for teams: post to a group, broadcast, a context's timeline, the directory."""

from __future__ import annotations

import argparse
from typing import Any

from meshd.cli.common import EXIT_OK, make_client, print_json, read_text, short, table
from meshd.errors import ConfigError
from meshd.models import parts_text


async def cmd_notify_group(args: argparse.Namespace) -> int:
    async with make_client(args) as client:
        out = await client.post_group(args.group_id, read_text(args.text), data=args.data)
    if args.json:
        print_json(out)
    else:
        print(f"{out['message_id']} sent to {out['recipients']} member(s) of {args.group_id}")
    return EXIT_OK


async def cmd_broadcast(args: argparse.Namespace) -> int:
    if not args.broadcast_id and (args.text is None or not (args.to or args.group)):
        raise ConfigError("`mesh broadcast TEXT` needs --to AGENT,... or --group GROUP "
                          "(or --show BROADCAST_ID to see one)")
    async with make_client(args) as client:
        if args.broadcast_id:
            out = await client.get_broadcast(args.broadcast_id)
        else:
            out = await client.broadcast(
                read_text(args.text), to_agent_ids=list(args.to) if args.to else None,
                group_id=args.group, policy=args.policy, n=args.n,
                timeout_seconds=args.timeout)
    if args.json:
        print_json(out)
    else:
        print(broadcast_text(out))
    return EXIT_OK


def broadcast_text(b: dict[str, Any]) -> str:
    lines = [f"broadcast {b['broadcast_id']}  [{b['status']}]  {b['completed']}/{b['n']} "
             f"completed needed ({b['policy']})  context {b['context_id']}"]
    rows = []
    for r in b["recipients"]:
        last = r.get("last_message") or {}
        note = short(parts_text(last.get("parts")), 60) if last else ""
        rows.append([r["agent_id"], r["state"] + (" (timed out)" if r["timed_out"] else ""),
                     r["task_id"], note])
    return "\n".join([*lines, table(rows)])


def _entry_line(e: dict[str, Any]) -> str:
    kind = e["kind"]
    if kind == "task":
        t = e["task"]
        what = f"task {t['task_id']}: {t['initiator']} → {t['serving_agent']}"
    elif kind == "message":
        m = e["message"]
        what = f"{m['sender']}: {short(parts_text(m['parts']), 120)}"
    elif kind == "state":
        s = e["state"]
        what = f"{s['from_state']} → {s['to_state']}" + (f" by {s['set_by']}" if s["set_by"] else "")
    else:
        a = e["artifact"]
        what = f"artifact {a['artifact_id']} {a.get('name') or ''}".rstrip()
    return f"{e['at']}  {kind:<8} {what}"


async def cmd_timeline(args: argparse.Namespace) -> int:
    async with make_client(args) as client:
        page = await client.timeline(args.context_id, cursor=args.cursor, limit=args.limit)
    if args.json:
        print_json(page)
        return EXIT_OK
    for e in page["entries"]:
        print(_entry_line(e))
    if page["next_cursor"]:
        print(f"… more: mesh timeline {args.context_id} --cursor {page['next_cursor']}")
    return EXIT_OK


async def cmd_directory(args: argparse.Namespace) -> int:
    async with make_client(args) as client:
        page = await client.directory(args.q or "", skill=args.skill, limit=args.limit,
                                      cursor=args.cursor)
    if args.json:
        print_json(page)
        return EXIT_OK
    if not page["agents"]:
        print("No listed agent matches.")
    print(table([[a["agent_id"], ", ".join(s.get("id", "") for s in a["skills"]),
                  short(a["description"], 60)] for a in page["agents"]]))
    if page["next_cursor"]:
        print(f"… more: --cursor {page['next_cursor']}")
    return EXIT_OK
