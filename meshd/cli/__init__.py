"""``mesh``: the agent's command line (one entry point for every command).

Credentials come from ``--url/--api-key``, else ``MESH_URL``/``MESH_API_KEY``
(or ``MESH_TOKEN``), else the config file ``mesh login`` writes (mode 0600).
Output is for people by default; ``--json`` prints the gateway's JSON for scripts.
Exit status: 0 ok, 1 the gateway refused (the problem's detail is printed),
2 usage or configuration, 3 the gateway could not be reached.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from meshd.cli.common import EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_USAGE, event_line, task_text
from meshd.cli.parser import build_parser
from meshd.errors import ConfigError, MeshConnectionError, MeshError, MeshHTTPError

__all__ = ["build_parser", "event_line", "main", "task_text"]


def _setup_logging(args: argparse.Namespace) -> None:
    level = logging.WARNING
    if args.command in ("daemon", "tail", "agent", "up"):
        level = logging.INFO
    if args.verbose:
        level = logging.DEBUG if args.verbose > 1 or level == logging.INFO else logging.INFO
    logging.basicConfig(
        level=level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if level > logging.DEBUG:
        logging.getLogger("httpx").setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        sys.exit(EXIT_USAGE)
    _setup_logging(args)
    try:
        code = asyncio.run(args.run(args))
    except KeyboardInterrupt:
        code = 130
    except ConfigError as e:
        print(f"mesh: {e}", file=sys.stderr)
        code = EXIT_USAGE
    except MeshHTTPError as e:
        print(f"mesh: {e.status} {e.title}: {e.detail or '(no detail)'}", file=sys.stderr)
        code = EXIT_REFUSED
    except MeshConnectionError as e:
        print(f"mesh: {e}", file=sys.stderr)
        code = EXIT_UNREACHABLE
    except MeshError as e:
        print(f"mesh: {e}", file=sys.stderr)
        code = EXIT_REFUSED
    except Exception as e:  # a bug or an input nobody foresaw: one line, the traceback on -vv
        if args.verbose > 1:
            raise
        print(f"mesh: unexpected error: {type(e).__name__}: {e} (run with -vv for details)", file=sys.stderr)
        code = EXIT_REFUSED
    sys.exit(code)
