"""The data folder: one owner, no leftovers.

One devstack at a time owns a data folder (a lock file). Whatever still works
in a folder whose lock is free was left behind by a devstack that died, and is
stopped before anything starts: Postgres, Redis and Kafka processes found by
their command line or working directory, and the Procfile process groups that
:func:`record_process_group` wrote down.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil

from devstack.say import say

# Binaries whose processes may be ours when they work inside our data folder.
SERVICE_EXES = {"postgres", "redis-server", "java", "nats-server"}
RECORDS = "processes"
LOCK = "devstack.lock"


@contextlib.contextmanager
def own_data_dir(data_dir: Path) -> Iterator[None]:
    """Hold ``<data>/devstack.lock`` for as long as we run. The lock is released
    by the kernel when we die, however we die, so a held lock means another
    live devstack, and a free one means anything still working in the folder
    was left behind by a devstack that is gone. It is a POSIX record lock
    (``lockf``), which forked children do not inherit: only this process owns it."""
    data_dir.mkdir(parents=True, exist_ok=True)
    lock_path = data_dir / LOCK
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if not _locked(fd):
            owner = lock_path.read_text().strip() or "?"
            raise SystemExit(
                f"devstack: another devstack (pid {owner}) is using {data_dir}; "
                "stop it first (Ctrl-C in its terminal), or set MESH_DATA_DIR "
                "to use another folder")
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def scratch_data_dir(prefix: str, parent: Path | None = None) -> Iterator[Path]:
    """A new temporary data folder (``<parent>/<prefix>XXXX``, the system's temp
    folder by default), owned for as long as the block runs; the caller removes it
    or keeps it. A folder still there when the block ends was kept on purpose and
    gives up its lock file; one whose owner died keeps it. First, folders of the
    same prefix whose owner died — a test session or bench killed before its
    cleanup — are stopped and removed (:func:`reap_abandoned`): their services
    would otherwise idle on the machine, and skew every benchmark beside them."""
    parent = parent or Path(tempfile.gettempdir())
    reap_abandoned(parent, prefix)
    root = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    with own_data_dir(root):
        try:
            yield root
        finally:
            (root / LOCK).unlink(missing_ok=True)


def reap_abandoned(parent: Path, prefix: str, timeout: float = 30.0) -> list[Path]:
    """Stop what is left running in, and remove, every ``<parent>/<prefix>*`` folder
    whose owner is gone: its lock file names a pid, yet the lock is free. A folder
    whose lock file is still empty is being set up (the pid is written once the lock
    is held), and one without a lock file is not ours to judge: both are left alone.
    A data folder nested one level down with a lock of its own (``make run``'s under
    the black-box bench) belonged to the dead run: a devstack still holding it is
    asked to stop (SIGTERM), then the folder's leftovers are stopped."""
    reaped = []
    for folder in sorted(parent.glob(f"{prefix}*")):
        fd = _lock_if_abandoned(folder / LOCK)
        if fd is None:
            continue
        try:
            say(f"devstack: removing {folder}, left behind by a run that died")
            for inner in sorted(folder.glob(f"*/{LOCK}")):
                _stop_owner(inner, timeout)
                stop_leftovers(inner.parent, timeout)
            stop_leftovers(folder, timeout)
            shutil.rmtree(folder, ignore_errors=True)
            reaped.append(folder)
        finally:
            os.close(fd)
    return reaped


def _locked(fd: int) -> bool:
    """Took the lock of the open file ``fd``; False while another process holds it."""
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _lock_if_abandoned(lock_path: Path) -> int | None:
    try:
        if not lock_path.read_text().strip():
            return None
        fd = os.open(lock_path, os.O_RDWR)
    except OSError:
        return None
    if _locked(fd):
        return fd
    os.close(fd)  # its owner is alive
    return None


def _stop_owner(lock_path: Path, timeout: float) -> None:
    """SIGTERM the process holding ``lock_path`` and wait for it to go. The holder
    is the pid the file names: the lock is not inherited by forks."""
    try:
        fd = os.open(lock_path, os.O_RDWR)
    except OSError:
        return
    try:
        if _locked(fd):
            return  # nobody holds it
    finally:
        os.close(fd)
    try:
        pid = int(lock_path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    say(f"devstack: stopping the devstack (pid {pid}) in {lock_path.parent}")
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    _wait_gone(pid, timeout)


def alive(pid: int) -> bool:
    """Running, and not a zombie waiting to be reaped."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def _exe_name(info: dict[str, object]) -> str:
    exe = info.get("exe")
    return os.path.basename(exe) if isinstance(exe, str) and exe else str(info.get("name") or "")


def leftover_services(data_dir: Path) -> list[tuple[int, str, str]]:
    """Postgres, Redis or Kafka processes working in ``data_dir`` (by their
    command line or working directory): [(pid, exe, cmdline)]."""
    root = str(data_dir)
    found: list[tuple[int, str, str, int]] = []
    for proc in psutil.process_iter(["pid", "ppid", "name", "exe", "cmdline", "cwd"]):
        info = proc.info
        if info["pid"] == os.getpid():
            continue
        exe = _exe_name(info)
        if exe not in SERVICE_EXES:
            continue
        cmdline = " ".join(info["cmdline"] or [])
        cwd = info["cwd"] or ""
        if f"{root}/" in cmdline or cwd == root or cwd.startswith(f"{root}/"):
            found.append((info["pid"], exe, cmdline, info["ppid"]))
    # Only the postmaster: its children are stopped by it.
    pids = {pid for pid, *_ in found}
    return [(pid, exe, cmd) for pid, exe, cmd, ppid in found
            if not (exe == "postgres" and ppid in pids)]


def _start_time(pid: int) -> float | None:
    """With the pid, the start time names one process for good, even after the
    pid is reused."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def record_process_group(record_dir: Path, name: str, pgid: int) -> None:
    record_dir.mkdir(parents=True, exist_ok=True)
    (record_dir / f"{name}.pid").write_text(f"{pgid} {_start_time(pgid)!r}\n")


def _same_process(pgid: int, recorded: str) -> bool:
    started = _start_time(pgid)
    try:
        # create_time() is derived from boot time and clock ticks: equal to
        # within a tick for one process, seconds apart for a reused pid.
        return started is not None and abs(started - float(recorded)) < 0.05
    except ValueError:
        return False


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
        if _same_process(pgid, started) and alive(pgid):
            say(f"devstack: stopping {path.stem} (process group {pgid}) left running "
                "by an earlier devstack")
            for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, sig)
                if _wait_gone(pgid, wait):
                    break
        path.unlink(missing_ok=True)


def _wait_gone(pid: int, timeout: float) -> bool:
    try:
        psutil.Process(pid).wait(timeout)
    except psutil.NoSuchProcess:
        return True
    except psutil.TimeoutExpired:
        return not alive(pid)
    return True


def stop_leftovers(data_dir: Path, timeout: float = 30.0) -> None:
    """Stop what a killed devstack left running in ``data_dir`` (Procfile
    processes, then services) and clear stale lock files, so the next start
    finds the folder as after a clean stop. Call only while holding the
    data-folder lock (or on a folder nobody else uses)."""
    stop_recorded_groups(data_dir / RECORDS, timeout)
    for pid, exe, _cmdline in leftover_services(data_dir):
        say(f"devstack: stopping {exe} (pid {pid}) left running in {data_dir} "
            "by an earlier devstack")
        # Postgres: SIGINT is its "fast" shutdown; the others stop on SIGTERM.
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGINT if exe == "postgres" else signal.SIGTERM)
        if not _wait_gone(pid, timeout):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _wait_gone(pid, 5.0)
    # A postmaster.pid naming a process that is not a postgres (the pid was
    # reused after a crash) makes Postgres refuse to start: remove it.
    pidfile = data_dir / "postgres" / "postmaster.pid"
    if pidfile.exists():
        try:
            pid = int(pidfile.read_text().split("\n", 1)[0])
        except ValueError:
            pid = -1
        if not _is_postgres(pid):
            say(f"devstack: removing stale {pidfile}")
            pidfile.unlink(missing_ok=True)
            for lock in (data_dir / "postgres").glob(".s.PGSQL.*.lock"):
                lock.unlink(missing_ok=True)


def _is_postgres(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        return psutil.Process(pid).name() == "postgres"
    except psutil.Error:
        return False


def report_stopped(data_dir: Path) -> None:
    left = leftover_services(data_dir)
    if left:
        pids = ", ".join(f"{exe} (pid {pid})" for pid, exe, _ in left)
        say(f"devstack: still running after stop: {pids}; the next run stops them")
    else:
        say("devstack: stopped; nothing left running")
