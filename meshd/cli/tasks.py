"""Commands about tasks and the inbox: send, reply, status, task(s), inbox, ack, tail."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging

from meshd.backoff import Backoff
from meshd.cli.common import EXIT_OK, event_line, make_client, print_json, read_text, table, task_text
from meshd.errors import MeshConnectionError, MeshHTTPError
from meshd.options import DaemonOptions


async def cmd_send(args: argparse.Namespace) -> int:
    metadata = dict(args.metadata or {})
    # Policy fields travel in the message metadata, read by the receiver's runtime.
    if args.complexity:
        metadata["complexity"] = args.complexity
    if args.no_handshake:
        metadata["handshake"] = False
    async with make_client(args) as client:
        task = await client.send(
            args.to_agent_id,
            read_text(args.text),
            data=args.data,
            metadata=metadata or None,
            task_id=args.task_id,
            context_id=args.context_id,
        )
    if args.json:
        print_json(task.raw)
    else:
        print(task.task_id)
    return EXIT_OK


async def cmd_reply(args: argparse.Namespace) -> int:
    async with make_client(args) as client:
        msg = await client.reply(args.task_id, read_text(args.text), data=args.data)
    if args.json:
        print_json(msg.raw)
    else:
        print(msg.message_id)
    return EXIT_OK


async def cmd_status(args: argparse.Namespace) -> int:
    async with make_client(args) as client:
        out = await client.set_status(args.task_id, args.state, args.message)
    if args.json:
        print_json(out)
    else:
        print(f"{args.task_id}: {out['state']}")
    return EXIT_OK


async def cmd_task(args: argparse.Namespace) -> int:
    async with make_client(args) as client:
        task = await client.get_task(args.task_id)
    if args.json:
        print_json(task.raw)
    else:
        print(task_text(task))
    return EXIT_OK


async def cmd_tasks(args: argparse.Namespace) -> int:
    async with make_client(args) as client:
        page = await client.list_tasks(
            state=args.state, context_id=args.context_id, cursor=args.cursor, limit=args.limit
        )
    if args.json:
        print_json({"tasks": [t.raw for t in page.tasks], "next_cursor": page.next_cursor})
        return EXIT_OK
    rows = [[t.task_id, t.state, f"{t.initiator} → {t.serving_agent}"] for t in page.tasks]
    print(table(rows) if rows else "No tasks.")
    if page.next_cursor:
        print(f"more: mesh tasks --cursor '{page.next_cursor}'")
    return EXIT_OK


async def cmd_inbox(args: argparse.Namespace) -> int:
    async with make_client(args) as client:
        page = await client.poll_inbox(args.after, wait=args.wait or None, limit=args.limit)
        if args.ack and page.events:
            await client.ack(page.events[-1].seq)
    if args.json:
        print_json({"events": [e.raw for e in page.events], "next_after": page.next_after})
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
        print_json(out)
    else:
        print(f"acked up to {out['acked_seq']}")
    return EXIT_OK


async def cmd_tail(args: argparse.Namespace) -> int:
    log = logging.getLogger("meshd.tail")
    after = args.after
    d = DaemonOptions()  # reconnects like the daemon does
    backoff = Backoff(d.reconnect_initial, d.reconnect_max)
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
