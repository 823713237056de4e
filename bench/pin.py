"""Pin the processes of a running bench or ``make run`` stack to CPUs by role, for
measuring what a CPU split does; the mesh itself never pins (an operator's choice).

    python bench/pin.py web=0,postgres=0,redis=0,relay=1,kafka=1,push=1,client=1 &
    python bench/run.py --only latency --name split-1; kill %1

Every thread of a matching process is pinned, and every process started later is
pinned as it appears (a Postgres backend goes with its postmaster), until killed.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

# role → a piece of the command line that names it (the Procfile's and the bench's)
ROLES = {
    "postgres": "pginstall/bin/postgres",
    "redis": "redis-server",
    "kafka": "kafka.Kafka",
    "web": "uvicorn app.main",
    "relay": "workers.relay",
    "push": "workers.push",
    "cron": "cron.worker",
    "webhook": "workers.webhook",
    "a2a-bridge": "workers.a2a_bridge",
    "client": "bench/run.py",
    "wrk": "/wrk ",
}


def parse(layout: str) -> dict[str, set[int]]:
    """``web=0,kafka=1+2`` → {"web": {0}, "kafka": {1, 2}}."""
    out: dict[str, set[int]] = {}
    for part in layout.split(","):
        role, _, cpus = part.partition("=")
        if role not in ROLES or not cpus:
            raise SystemExit(f"{part!r}: want ROLE=CPU[+CPU…], ROLE one of {', '.join(ROLES)}")
        out[role] = {int(c) for c in cpus.split("+")}
    return out


def processes() -> dict[int, tuple[str, int]]:
    """pid → (command line, parent pid)."""
    found: dict[int, tuple[str, int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        found[int(entry.name)] = (cmd, ppid)
    return found


def roles_of(procs: dict[int, tuple[str, int]], wanted: set[str]) -> dict[int, str]:
    owner = {pid: role for pid, (cmd, _) in procs.items()
             for role in wanted if ROLES[role] in cmd}
    for pid, (_, ppid) in procs.items():
        if pid not in owner and owner.get(ppid) == "postgres":
            owner[pid] = "postgres"
    return owner


def main() -> None:
    layout = parse(sys.argv[1] if len(sys.argv) > 1 else "")
    pinned: set[int] = set()  # thread ids; a new thread inherits its creator's mask
    while True:
        for pid, role in roles_of(processes(), set(layout)).items():
            try:
                for task in Path(f"/proc/{pid}/task").iterdir():
                    tid = int(task.name)
                    if tid not in pinned:
                        os.sched_setaffinity(tid, layout[role])
                        pinned.add(tid)
            except OSError:
                continue  # exited meanwhile
        time.sleep(0.2)


if __name__ == "__main__":
    main()
