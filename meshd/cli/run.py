"""The long-running commands: ``mesh daemon``, ``mesh mcp`` and ``mesh agent``
(their servers, and the agent's Claude Agent SDK, are imported only when run)."""

from __future__ import annotations

import argparse
import logging

from meshd.cli.common import EXIT_OK, cli_config, make_client
from meshd.daemon.handlers import CallableHandler, ExecHandler, Handler, load_callable
from meshd.errors import ConfigError
from meshd.options import MAX_POLL_WAIT, DaemonOptions


def daemon_options(args: argparse.Namespace, *, reply: bool) -> DaemonOptions:
    """The delivery options ``mesh daemon`` and ``mesh agent`` share."""
    return DaemonOptions(
        state_dir=args.state_dir,
        window=args.window,
        transport=args.transport,
        heartbeat_interval=args.heartbeat,
        reconnect_initial=args.reconnect_initial,
        reconnect_max=args.reconnect_max,
        poll_wait=min(args.poll_wait, MAX_POLL_WAIT),
        sse_read_timeout=args.sse_read_timeout,
        attempts=args.attempts,
        retry_initial=args.retry_initial,
        retry_max=args.retry_max,
        shutdown_grace=args.grace,
        reply=reply,
    )


async def cmd_daemon(args: argparse.Namespace) -> int:
    from meshd.daemon.service import Daemon

    handler: Handler
    if args.exec_cmd:
        handler = ExecHandler(args.exec_cmd, timeout=args.timeout)
    else:
        try:
            handler = CallableHandler(load_callable(args.handler), name=args.handler)
        except (ImportError, ValueError) as e:
            raise ConfigError(f"--handler {args.handler}: {e}") from e
    opts = daemon_options(args, reply=not args.no_reply)
    async with make_client(args, max_attempts=5) as client:
        return await Daemon(client, handler, opts).run()


async def cmd_mcp(args: argparse.Namespace) -> int:
    from meshd.mcp.server import serve_stdio

    cfg = cli_config(args)
    await serve_stdio(cfg)
    return EXIT_OK


async def cmd_agent(args: argparse.Namespace) -> int:
    from meshd.agent.policies.config import PolicyConfig
    from meshd.agent.settings import AgentSettings, RunSettings
    from meshd.daemon.service import Daemon

    try:
        from meshd.agent.runner import AgentRunner
    except ImportError as e:
        raise ConfigError(
            f"`mesh agent` needs the Claude Agent SDK ({e}); install it with "
            "pip install './meshd[claude]' from a checkout of the repository "
            "(the package is not on PyPI)"
        ) from e
    settings = AgentSettings(
        state_dir=args.state_dir,
        workspace=args.workspace,
        run=RunSettings(
            max_turns=args.max_turns,
            max_budget_usd=args.max_budget_usd,
            timeout=args.timeout,
            model=args.model,
            effort=args.effort,
        ),
        run_on=frozenset(args.run_on),
        auto_reply=not args.no_auto_reply,
        auto_complete=not args.no_auto_complete,
        tools=tuple(dict.fromkeys([*args.tools, *args.allow_tool])),
        extra_dirs=tuple(args.add_dir),
        history=args.history,
        cli_path=args.cli_path,
        policies=PolicyConfig(
            complexity=not args.no_complexity,
            handshake=args.handshake,
            loop_limit=args.loop_limit,
            max_tool_calls=args.max_tool_calls,
            tool_failures=args.tool_failures,
            failed_runs=args.failed_runs,
            chit_chat=args.chit_chat,
            checks=tuple(args.check),
            plans=not args.no_plans,
            broadcast_max_turns=args.broadcast_max_turns,
            broadcast_max_budget_usd=args.broadcast_max_budget_usd,
            notes=not args.no_notes,
            check_timeout=args.check_timeout,
            unsafe_check=args.unsafe_check,
        ),
    )
    # The runner posts its own replies (with the run's figures in their metadata).
    opts = daemon_options(args, reply=False)
    runner = AgentRunner(settings)  # refuses --check without a sandbox before connecting
    if not args.skip_model_check:
        from meshd.agent import model_api

        logging.getLogger("meshd.agent").info("%s", await model_api.check(args.model))
    async with make_client(args, max_attempts=5) as client:
        return await Daemon(client, runner, opts).run()
