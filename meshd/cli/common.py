"""What every command shares: credentials → client, exit codes, and the human-readable output."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from meshd.client import MeshClient
from meshd.config import Config, load_config
from meshd.models import InboxEvent, Task, parts_text

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3


def cli_config(args: argparse.Namespace, *, required: bool = True) -> Config:
    cfg = load_config(url=args.url, api_key=args.api_key, token=args.token, path=args.config)
    return cfg.require() if required else cfg


def make_client(args: argparse.Namespace, **kw: Any) -> MeshClient:
    cfg = cli_config(args)
    assert cfg.url is not None
    kw.setdefault("max_attempts", 3)  # a person is waiting: fail within a second or two
    return MeshClient(cfg.url, api_key=cfg.api_key, token=cfg.token, **kw)


def print_json(data: Any, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    json.dump(data, out, indent=2, ensure_ascii=False, default=str)
    out.write("\n")
    out.flush()


def read_text(text: str) -> str:
    return sys.stdin.read() if text == "-" else text


def short(text: str, width: int = 80) -> str:
    one = " ".join(text.split())
    return one if len(one) <= width else one[: width - 1] + "…"


def table(rows: list[list[str]]) -> str:
    if not rows:
        return ""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def event_line(e: InboxEvent) -> str:
    bits = [f"#{e.seq}", e.type]
    if e.from_agent_id:
        bits.append(f"from {e.from_agent_id}")
    if e.task_id:
        bits.append(f"task {e.task_id}")
    p = e.payload
    if e.type == "task.status":
        bits.append(f"{p['previous_state']} → {p['state']}")
    text = e.text
    if not text and e.type.startswith("friend."):
        req = p["request"]
        text = req.get("note") or req.get("request_id") or ""
    if text:
        bits.append(f"“{short(text, 100)}”")
    return "  ".join(bits)


def task_text(task: Task) -> str:
    lines = [
        f"task {task.task_id}  [{task.state}]",
        f"  {task.initiator} → {task.serving_agent}   context {task.context_id}",
    ]
    for m in task.messages:
        tail = f"  ({m.receipt.status})" if m.receipt else ""
        lines.append(f"  {m.created_at or ''}  {m.sender}: {short(m.text, 200)}{tail}")
    for a in task.artifacts:
        lines.append(
            f"  artifact {a.get('artifact_id')}: {a.get('name') or ''} "
            f"{short(parts_text(a.get('parts')), 80)}"
        )
    return "\n".join(lines)
