"""bench/wrk/send.lua against a real gateway: each request is one send from the
cast's senders to its recipients, the script's counts are what the gateway did
(every 201 is a row, in flight at the stop at most one per connection), and its
result line parses (bench/wrk_run.py)."""

from __future__ import annotations

import uuid
from pathlib import Path

import asyncpg

from bench import wrk_run
from bench.load import make_cast


async def test_the_send_script_writes_a_row_for_every_201(gateway: str, db: asyncpg.Pool,
                                                          tmp_path: Path) -> None:
    cast = await make_cast(gateway, 3, 2)
    cast_file = tmp_path / "cast.txt"
    cast_file.write_text(" ".join(a.agent_id for a in cast.recipients) + "\n" + "\n".join(
        a.headers["Authorization"].removeprefix("Bearer ") for a in cast.senders) + "\n")
    run_id = uuid.uuid4().hex[:8]
    run = await wrk_run.run(gateway, cast_file, run_id, connections=2, seconds=1)
    assert run.created > 0 and run.refused == 0 and run.socket_errors == 0
    assert run.requests >= run.created and 0 < run.p50_ms <= run.p99_ms <= run.max_ms
    rows = await db.fetch("SELECT sender, recipient FROM task_messages WHERE message_id LIKE $1",
                          f"m-wrk-{run_id}-%")
    assert run.created <= len(rows) <= run.created + run.connections
    assert {r["sender"] for r in rows} == {a.agent_id for a in cast.senders}
    assert {r["recipient"] for r in rows} <= {a.agent_id for a in cast.recipients}
