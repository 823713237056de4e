"""Black-box: the mesh as a user runs it, loaded from outside, next to what Postgres
alone does with the same writes — in one sitting.

    python bench/blackbox.py [--seconds 15] [--connections 16] [--name NAME]

1. ``python -m devstack run`` — exactly ``make run``: embedded Postgres, Redis and
   Kafka, migrations, and every Procfile process (web, outbox, push, cron, webhook,
   a2a-bridge) with the settings a user gets — in a data folder of its own
   (``MESH_DATA_DIR``) and on a free ``PORT``.
2. Through the public API: one owner, ``--senders`` agents sending to
   ``--recipients`` agents, all in one group.
3. ``wrk`` (:mod:`bench.wrk_run`) at each ``--connections`` level, closed loop,
   each after a 3 s warm-up at that level; CPU of every process of the stack and of wrk counted.
   The rows written are counted against the 201s, and the outbox must drain.
4. ``pgbench`` on the stack's Postgres at the same client counts, as long
   (``--pgbench-seconds`` to shorten them):
   the lean write set (one counter update, three inserts), the five-statement write
   set, and the gateway's own create statement (:mod:`bench.scenarios.pgbench`).

The report (bench/results/<date>-blackbox[-NAME].md) gives sends/s ÷ pgbench tx/s
for the lean and the real statements, p99, and CPU per send by process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.platform.metrics import TASK_CREATE_STATEMENTS
from app.platform.settings import Settings
from bench import blackbox_pg, wrk_run
from bench.blackbox_report import Level, Measured, render
from bench.cpu import CpuMeter
from bench.env import machine_facts
from bench.load import db_now, make_cast, relay_batches_since
from bench.scenarios import pgbench
from bench.stalls import StallWatch
from devstack.leftovers import scratch_data_dir
from devstack.ports import listening_pid
from devstack.process import free_port
from devstack.procfile import read as procfile_of
from devstack.stack import Ports

REPO = Path(__file__).resolve().parents[1]
PROCFILE = REPO / "Procfile"
DATABASE_URL = f"postgresql://postgres@127.0.0.1:{Ports.fixed().postgres}/mesh"
# make run sets no MESH_BUS_TOPIC: the mesh's rows go to the default topic.
BUS_TOPIC = Settings.model_fields["bus_topic"].default
# Embedded service → its fixed port (the server may run detached from devstack).
SERVICES = (("postgres", Ports.fixed().postgres), ("redis", Ports.fixed().redis),
            ("kafka", Ports.fixed().kafka))


def stack_meter(devstack_pid: int, procfile: Path, only: str | None = None) -> CpuMeter:
    """One component per Procfile process (its shell, whose command line is the
    Procfile's command, and what that started) and per service (the server and its
    descendants, e.g. the Postgres backends); wrk's CPU is counted apart. ``only``:
    just that component."""
    commands = procfile_of(procfile).processes
    parts: dict[str, tuple[int, bool]] = {"devstack": (devstack_pid, False)}
    for child in psutil.Process(devstack_pid).children():
        with contextlib.suppress(psutil.Error):
            line = " ".join(child.cmdline())
            name = next((name for name, command in commands if command in line), None)
            if name is not None:
                parts.setdefault(name, (child.pid, True))
    for name, port in SERVICES:
        if (pid := listening_pid(port)) is not None:
            parts[name] = (pid, True)
    if only is not None:
        parts = {only: parts[only]}
    return CpuMeter(parts)


@contextlib.asynccontextmanager
async def make_run(data_dir: Path, port: int, log: Path,
                   procfile: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    # absolute: devstack runs in the repository
    env = {**os.environ, "MESH_DATA_DIR": str(data_dir), "PORT": str(port), "MESH_PROCFILE": str(procfile)}
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "devstack", "run", cwd=REPO, env=env, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True)
        try:
            await _ready(f"http://127.0.0.1:{port}", proc, log)
            yield proc
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), 120)
                except TimeoutError:
                    os.killpg(proc.pid, signal.SIGKILL)
                    await proc.wait()


async def _ready(base: str, proc: asyncio.subprocess.Process, log: Path, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(timeout=2) as http:
        while time.monotonic() < deadline:
            if proc.returncode is not None:
                raise SystemExit(f"make run's stack exited ({proc.returncode}); see {log}")
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get(f"{base}/readyz")).status_code == 200:
                    return
            await asyncio.sleep(0.5)  # startup poll: nothing to await but the port
    raise SystemExit(f"make run's stack was not ready after {timeout:.0f} s; see {log}")


async def _alter_system(assignments: list[str]) -> None:
    """``name=value`` for every session, the stack's included (a reload reaches
    sessions already open), for an A/B of a Postgres setting."""
    if not assignments:
        return
    conn = await asyncpg.connect(DATABASE_URL)
    try:
        for assignment in assignments:
            name, _, value = assignment.partition("=")
            if not (re.fullmatch(r"[a-z_.]+", name) and re.fullmatch(r"[A-Za-z0-9_.-]+", value)):
                raise SystemExit(f"--pg-set {assignment!r}: want name=value (letters, digits, _ . -)")
            await conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
        await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()


async def _written(run_id: str) -> int:
    conn = await asyncpg.connect(DATABASE_URL)
    try:
        return int(await conn.fetchval(
            "SELECT count(*) FROM task_messages WHERE message_id LIKE $1", f"m-wrk-{run_id}-%"))
    finally:
        await conn.close()


async def _create_statements(base: str) -> float:
    """The web process's count of create statements so far (its ``/metrics``)."""
    name = TASK_CREATE_STATEMENTS.describe()[0].name + "_total"
    async with httpx.AsyncClient(timeout=5) as http:
        text = (await http.get(f"{base}/metrics")).text
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else float("nan")


async def _outbox_drained(timeout: float = 120) -> float:
    """Seconds until no outbox row of the mesh's topics is pending (the relay kept up)."""
    conn = await asyncpg.connect(DATABASE_URL)
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < timeout:
            if not await conn.fetchval("SELECT count(*) FROM outbox_events WHERE status = 'pending' "
                                       "AND topic <> $1", pgbench.TOPIC):
                return time.monotonic() - t0
            await asyncio.sleep(0.2)
    finally:
        await conn.close()
    raise RuntimeError(f"the outbox still had pending rows {timeout:.0f} s after the run")


async def main(args: argparse.Namespace) -> Path | None:
    facts = machine_facts()
    started = time.monotonic()
    if args.procfile != PROCFILE:
        facts["Procfile"] = f"`{args.procfile}` (not the repository's)"
    if args.pg_set:
        facts["Postgres settings (ALTER SYSTEM)"] = " ".join(f"`{s}`" for s in args.pg_set)
    with scratch_data_dir("mesh-blackbox-") as work:
        try:
            measured = await _measure(args, work)
        finally:
            if args.keep:
                print(f"blackbox: kept {work}", file=sys.stderr)
            else:
                shutil.rmtree(work, ignore_errors=True)  # the stack's data: hundreds of MB a run
    facts["load average at end (1/5/15 min)"] = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    facts["bench duration"] = f"{time.monotonic() - started:.0f} s"
    text = render(facts, args, *measured)
    if args.no_write:
        print(text)
        return None
    out = REPO / "bench" / "results" / f"{dt.date.today()}-blackbox{'-' + args.name if args.name else ''}.md"
    out.write_text(text)
    print(f"blackbox: wrote {out.relative_to(REPO)}", file=sys.stderr)
    return out


async def _measure(args: argparse.Namespace, work: Path) -> Measured:
    """The stack up, the cast made, then per level: wrk, the checks, pgbench; the
    report's inputs in :func:`render`'s order."""
    connections = [int(c) for c in args.connections.split(",")]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    print(f"blackbox: make run's stack in {work} on {base} ...", file=sys.stderr)
    async with make_run(work / "data", port, work / "devstack.log", args.procfile) as proc:
        await _alter_system(args.pg_set)
        cast = await make_cast(base, args.senders, args.recipients)
        cast_file = work / "cast.txt"
        lines = [" ".join(a.agent_id for a in cast.recipients)]
        lines += [a.headers["Authorization"].removeprefix("Bearer ") for a in cast.senders]
        cast_file.write_text("\n".join(lines) + "\n")
        await pgbench.prepare(DATABASE_URL, args.recipients)
        levels: list[Level] = []
        for i, c in enumerate(connections):
            # A level starts warm: pgbench's runs before it outlast the web caches'
            # TTL, and a level is a steady state. --cold leaves the first one as a
            # user's first measurement meets the stack.
            if not (args.cold and i == 0):
                print(f"blackbox: warm-up at c={c} ...", file=sys.stderr)
                await wrk_run.run(base, cast_file, f"warm{uuid.uuid4().hex[:6]}", connections=c,
                                  seconds=3)
                await _outbox_drained()
            run_id = uuid.uuid4().hex[:8]
            print(f"blackbox: wrk at c={c} ...", file=sys.stderr)
            kept_before = await blackbox_pg.upkeep(DATABASE_URL)
            statements_before = await _create_statements(base)
            run_start = await db_now(DATABASE_URL)
            with StallWatch() as watch:
                run = await wrk_run.run(base, cast_file, run_id, connections=c, seconds=args.seconds,
                                        meter=stack_meter(proc.pid, args.procfile))
            # Read before the drain and the row count: the count scans task_messages.
            kept = await blackbox_pg.upkeep(DATABASE_URL) - kept_before
            drained = await _outbox_drained()
            written = await _written(run_id)
            statements = await _create_statements(base) - statements_before
            relayed = await relay_batches_since(DATABASE_URL, BUS_TOPIC, run_start)
            runs: dict[str, pgbench.PgbenchRun] = {}
            for variant in ("lean", "split", "real"):
                print(f"blackbox: pgbench {variant} at c={c} ...", file=sys.stderr)
                runs[variant] = await pgbench.run(
                    DATABASE_URL, work, clients=c, seconds=args.pgbench_seconds or args.seconds,
                    n_senders=args.senders, n_recipients=args.recipients, variant=variant,
                    meter=stack_meter(proc.pid, args.procfile, only="postgres"))
            await pgbench.cleanup(DATABASE_URL)
            levels.append(Level(run, written, drained, statements, watch.summary(), kept, runs,
                                relayed))
        plan = await blackbox_pg.explain_create(DATABASE_URL, args.senders, args.recipients)
        tables = await blackbox_pg.tables(DATABASE_URL)
    return levels, tables, plan


def cli() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=15.0, help="length of each wrk and pgbench run")
    p.add_argument("--pgbench-seconds", type=float, default=None,
                   help="length of each pgbench run (default: --seconds)")
    p.add_argument("--connections", default="16", help="comma list of wrk connections / pgbench clients")
    p.add_argument("--senders", type=int, default=100)
    p.add_argument("--recipients", type=int, default=10)
    p.add_argument("--name", default="", help="short name for the results file")
    p.add_argument("--procfile", type=Path, default=PROCFILE,
                   help="run this Procfile instead (e.g. another web server)")
    p.add_argument("--pg-set", action="append", default=[], metavar="NAME=VALUE",
                   help="ALTER SYSTEM SET this on the stack's Postgres (repeatable)")
    p.add_argument("--cold", action="store_true",
                   help="no warm-up before the first level: it meets the web's caches empty")
    p.add_argument("--no-write", action="store_true", help="print the report; write no file")
    p.add_argument("--keep", action="store_true", help="keep the stack's data folder and logs")
    args = p.parse_args()
    args.procfile = args.procfile.resolve()
    asyncio.run(main(args))


if __name__ == "__main__":
    cli()
