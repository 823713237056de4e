"""The soak: ``make soak`` or ``python bench/soak.py [options]``.

Starts its own embedded Postgres/Redis/Kafka/NATS (ephemeral ports, a temp folder),
the mesh processes as the Procfile runs them (2 web, 2 outbox relays, 2 push
workers, 1 cron by default), sends ``--rate`` messages/s for ``--minutes`` among
``--agents`` agents while every fault kind of the fault suite strikes at random,
then counts per recipient (0 lost, 0 duplicated, 0 out of order), checks the
outbox drained and every process's RSS/open files stayed flat, and writes a
markdown report (bench/results/<date>-soak.md, or ``--out``). Exit status 1 if
any check failed. See docs/soak.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import shlex
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: make the repo's packages importable
    sys.path.insert(0, str(REPO))

from bench.env import machine_facts, raise_nofile, started  # noqa: E402
from bench.soak_report import render, verdict  # noqa: E402
from bench.soak_run import SoakPlan, run_soak, soak_settings  # noqa: E402


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--rate", type=float, default=60.0, help="messages per second")
    ap.add_argument("--agents", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bus", choices=["kafka", "redis", "nats"], default="kafka")
    ap.add_argument("--scale", type=int, default=2,
                    help="web, outbox and push processes of each kind")
    ap.add_argument("--out", type=Path, help="report path (default bench/results/<date>-soak.md)")
    ap.add_argument("--keep", action="store_true", help="keep the temp data folder and logs")
    return ap.parse_args(argv)


def plan_of(args: argparse.Namespace) -> SoakPlan:
    seconds = args.minutes * 60
    # Short runs (a smoke of the command) space faults and warm up proportionally.
    scale = min(1.0, seconds / 1800)
    return SoakPlan(seconds=seconds, rate=args.rate, agents=args.agents, seed=args.seed,
                    scale=args.scale,
                    fault_gap=(max(3.0, 20 * scale), max(6.0, 60 * scale)),
                    offline=(max(3.0, 10 * scale), max(6.0, 60 * scale)),
                    sample_every=5.0 if seconds >= 600 else 2.0,
                    warmup=max(20.0, min(120.0, seconds / 10)))


async def main_async(args: argparse.Namespace) -> int:
    facts = machine_facts()
    facts["open files limit"] = str(raise_nofile())
    async with started(keep=args.keep) as env:
        if args.bus == "kafka" and not env.kafka:
            print("soak: no Kafka here (Java/Maven missing); use --bus redis|nats",
                  file=sys.stderr)
            return 2
        if args.bus == "nats" and not env.nats:
            print("soak: no nats-server here; use --bus kafka|redis", file=sys.stderr)
            return 2
        result = await run_soak(plan_of(args), soak_settings(env.settings, args.bus), env.stack,
                                say=lambda line: print(line, file=sys.stderr, flush=True))
    command = "python bench/soak.py " + shlex.join(sys.argv[1:])
    text = render(result, facts, command)
    out = args.out or REPO / "bench" / "results" / f"{dt.date.today().isoformat()}-soak.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    print(f"soak: report written to {out}", file=sys.stderr)
    return 0 if verdict(result)[0] else 1


def main() -> None:
    sys.exit(asyncio.run(main_async(parse(sys.argv[1:]))))


if __name__ == "__main__":
    main()
