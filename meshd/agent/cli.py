"""``mesh agent``: the command line of the agent runtime (argparse only; the SDK loads on start)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from meshd.agent.settings import DEFAULT_RUN_ON, DEFAULT_TOOLS, AgentSettings, RunSettings
from meshd.errors import ConfigError

EPILOG = """\
Runs the Claude Agent SDK (with its bundled Claude Code CLI) once per inbox event
that needs thought, behind the same delivery loop as `mesh daemon`. Install with
pip install 'agent-meshd[claude]'. The model's credentials come from the
environment as the SDK expects (ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, ...).

Per event: at most --max-turns turns, --max-budget-usd dollars and --timeout
seconds; a run that hits one is not retried, its task gets a note and is set
failed. Defaults: no shell, no web, file tools inside --workspace only.
See docs/meshd.md, "Claude as a mesh agent".
"""


def _csv(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def add_agent_command(add: Callable[..., argparse.ArgumentParser], positive: Callable[[type], Any]) -> None:
    p = add(
        "agent",
        "run an LLM (Claude Agent SDK) for every inbox event that needs thought",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EPILOG,
    )
    g = p.add_argument_group("limits per event (never retried past one)")
    g.add_argument("--max-turns", type=positive(int), default=30, help="model turns (default 30)")
    g.add_argument("--max-budget-usd", type=positive(float), default=5.0, help="USD (default 5)")
    g.add_argument("--timeout", type=positive(float), default=900.0, metavar="S",
                   help="wall clock, seconds (default 900)")  # fmt: skip
    g = p.add_argument_group("model and permissions")
    g.add_argument("--workspace", type=Path, help="the run's cwd (default: STATE_DIR/workspace)")
    g.add_argument("--model", help="model name (default: the CLI's default)")
    g.add_argument("--effort", choices=("low", "medium", "high", "xhigh", "max"))
    g.add_argument("--tools", type=_csv, default=DEFAULT_TOOLS, metavar="LIST",
                   help=f"built-in tools offered (default {','.join(DEFAULT_TOOLS)})")  # fmt: skip
    g.add_argument("--allow-tool", action="append", default=[], metavar="NAME",
                   help="also offer this built-in tool, e.g. Bash (repeatable; think first)")  # fmt: skip
    g.add_argument("--add-dir", action="append", type=Path, default=[], metavar="DIR",
                   help="another folder the file tools may use (repeatable)")  # fmt: skip
    g = p.add_argument_group("behaviour")
    g.add_argument("--run-on", type=_csv, default=DEFAULT_RUN_ON, metavar="TYPES",
                   help=f"event types that start a run (default {','.join(DEFAULT_RUN_ON)})")  # fmt: skip
    g.add_argument("--no-auto-reply", action="store_true",
                   help="do not post a run's final text when it posted nothing")  # fmt: skip
    g.add_argument("--history", type=positive(int), default=20, help="earlier task messages shown")
    g.add_argument("--cli-path", help="a Claude Code CLI to use instead of the bundled one")
    g = p.add_argument_group("delivery (as for `mesh daemon`)")
    g.add_argument("--state-dir", type=Path, help="state folder (default: per agent, see docs)")
    g.add_argument("--attempts", type=positive(int), default=2,
                   help="tries of a run that failed with an error (not a limit)")  # fmt: skip
    g.add_argument("--retry-initial", type=positive(float), default=1.0, metavar="S")
    g.add_argument("--retry-max", type=positive(float), default=30.0, metavar="S")
    g.add_argument("--window", type=positive(int), default=500, help="dedup window (ids)")
    g.add_argument("--transport", choices=("auto", "sse", "poll"), default="auto")
    g.add_argument("--heartbeat", type=positive(float), default=30.0, metavar="S")
    g.add_argument("--reconnect-initial", type=positive(float), default=1.0, metavar="S")
    g.add_argument("--reconnect-max", type=positive(float), default=30.0, metavar="S")
    g.add_argument("--poll-wait", type=positive(float), default=25.0, metavar="S")
    g.add_argument("--grace", type=positive(float), default=15.0, metavar="S",
                   help="on SIGTERM, how long the running run may still take")  # fmt: skip
    p.set_defaults(run=cmd_agent)


def settings_from_args(args: argparse.Namespace) -> AgentSettings:
    tools = tuple(dict.fromkeys([*args.tools, *args.allow_tool]))
    return AgentSettings(
        state_dir=args.state_dir,
        workspace=args.workspace,
        run=RunSettings(max_turns=args.max_turns, max_budget_usd=args.max_budget_usd,
                        timeout=args.timeout, model=args.model, effort=args.effort),
        run_on=frozenset(args.run_on),
        auto_reply=not args.no_auto_reply,
        tools=tools,
        extra_dirs=tuple(args.add_dir),
        history=args.history,
        cli_path=args.cli_path,
    )


async def cmd_agent(args: argparse.Namespace) -> int:
    from meshd.cli import make_client
    from meshd.daemon import Daemon, DaemonOptions

    try:
        from meshd.agent.runner import AgentRunner
    except ImportError as e:
        raise ConfigError(
            f"`mesh agent` needs the Claude Agent SDK ({e}); install it with "
            "pip install 'agent-meshd[claude]'"
        ) from e
    runner = AgentRunner(settings_from_args(args))
    opts = DaemonOptions(
        state_dir=args.state_dir,
        window=args.window,
        transport=args.transport,
        heartbeat_interval=args.heartbeat,
        reconnect_initial=args.reconnect_initial,
        reconnect_max=args.reconnect_max,
        poll_wait=min(args.poll_wait, 30.0),
        attempts=args.attempts,
        retry_initial=args.retry_initial,
        retry_max=args.retry_max,
        shutdown_grace=args.grace,
        # The runner posts its own replies (with the run's figures in their metadata).
        reply=False,
    )
    async with make_client(args, max_attempts=5) as client:
        return await Daemon(client, runner, opts).run()
