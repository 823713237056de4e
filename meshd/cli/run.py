"""The long-running commands: ``mesh daemon`` and ``mesh mcp`` (their servers are imported only when run)."""

from __future__ import annotations

import argparse

from meshd.cli.common import EXIT_OK, cli_config, make_client
from meshd.errors import ConfigError
from meshd.handlers import CallableHandler, ExecHandler, Handler, load_callable
from meshd.options import MAX_POLL_WAIT, DaemonOptions


async def cmd_daemon(args: argparse.Namespace) -> int:
    from meshd.daemon import Daemon

    handler: Handler
    if args.exec_cmd:
        handler = ExecHandler(args.exec_cmd, timeout=args.timeout)
    else:
        try:
            handler = CallableHandler(load_callable(args.handler), name=args.handler)
        except (ImportError, ValueError) as e:
            raise ConfigError(f"--handler {args.handler}: {e}") from e
    opts = DaemonOptions(
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
        reply=not args.no_reply,
    )
    async with make_client(args, max_attempts=5) as client:
        return await Daemon(client, handler, opts).run()


async def cmd_mcp(args: argparse.Namespace) -> int:
    from meshd.mcp_server import serve_stdio

    cfg = cli_config(args)
    await serve_stdio(cfg)
    return EXIT_OK
