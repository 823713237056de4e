"""``mesh up FILE`` (several agents under one supervisor) and ``mesh status [FILE]`` (their state).

``mesh status`` also keeps its older form, ``mesh status TASK STATE``, which moves
a task: with two arguments it is that; with none or one it lists the agents of
a ``mesh up`` file (default ``mesh.toml``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from meshd.cli.common import EXIT_OK, print_json, table
from meshd.cli.tasks import cmd_status as cmd_task_status
from meshd.errors import ConfigError

DEFAULT_FILE = "mesh.toml"


async def cmd_up(args: argparse.Namespace) -> int:
    from meshd.up.spec import load_up
    from meshd.up.supervisor import Supervisor

    plan = load_up(args.file)
    if args.check:
        if args.json:
            print_json([{"id": a.id, "kind": a.kind, "argv": a.argv()} for a in plan.agents])
        else:
            print(f"{args.file}: {len(plan.agents)} agents, ok")
        return EXIT_OK
    return await Supervisor(plan).run()


def _agents(path: Path) -> list[dict[str, Any]]:
    from meshd.up.spec import load_up
    from meshd.up.status import agent_status

    if not path.exists():
        raise ConfigError(
            f"no such file: {path} (`mesh status [FILE]` lists the agents of a `mesh up` file; "
            "to move a task: `mesh status TASK STATE`)"
        )
    return [agent_status(a) for a in load_up(path).agents]


async def cmd_status(args: argparse.Namespace) -> int:
    if args.state is not None:
        return await cmd_task_status(args)
    from meshd.up.status import status_rows

    rows = _agents(Path(args.task_id or DEFAULT_FILE))
    if args.json:
        print_json(rows)
    else:
        print(table(status_rows(rows)))
    return EXIT_OK
