"""devstack's own logic, in process: the Procfile, the bus decision, ports,
leftover records and the supervisor (with real, short-lived child processes;
no services)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import psutil
import pytest

from devstack import procfile
from devstack.bus import BusChoice, KafkaPolicy, NatsPolicy, failed, plan_bus, plan_nats
from devstack.config import Options, process_env, redact
from devstack.leftovers import (
    LOCK,
    alive,
    reap_abandoned,
    record_process_group,
    scratch_data_dir,
    stop_recorded_groups,
)
from devstack.ports import listening_pid, metrics_ports, web_address
from devstack.supervise import Supervisor

# --- the Procfile ---------------------------------------------------------------------


def test_procfile_release_apart_and_the_rest_in_file_order() -> None:
    spec = procfile.parse(
        "# the mesh\n"
        "release: python -m app.platform.migrate\n"
        "web: uvicorn app.main:create_app --port ${PORT:-8080}\n"
        "\n"
        "push:   python -m workers.push  \n"
        "not a process line\n"
    )
    assert spec.release == "python -m app.platform.migrate"
    assert spec.processes == [("web", "uvicorn app.main:create_app --port ${PORT:-8080}"),
                              ("push", "python -m workers.push")]
    assert spec.names == ["web", "push"]


def test_procfile_errors_say_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="no `release` process"):
        procfile.parse("web: uvicorn app\n")
    with pytest.raises(ValueError, match=r"Procfile:3: process `web` is defined twice"):
        procfile.parse("release: m\nweb: a\nweb: b\n")


def test_the_repository_procfile_parses() -> None:
    spec = procfile.read(Path(__file__).resolve().parents[1] / "Procfile")
    assert "web" in spec.names and spec.release


def test_missing_procfile_is_a_clear_exit(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no Procfile at"):
        procfile.read(tmp_path / "Procfile")


# --- Kafka or Redis Streams -------------------------------------------------------------


def test_a_bootstrap_in_the_environment_wins_over_every_policy() -> None:
    for policy in KafkaPolicy:
        plan = plan_bus(policy, {"MESH_KAFKA_BOOTSTRAP": "k:9092"}, java=False)
        assert plan.external == "k:9092" and not plan.start_kafka


def test_off_and_missing_java_fall_back_to_redis_streams_out_loud() -> None:
    off = plan_bus(KafkaPolicy.OFF, {}, java=True)
    assert off.fallback is not None and off.fallback.how == "off" and not off.start_kafka
    for policy in (KafkaPolicy.FALLBACK, KafkaPolicy.IF_JAVA):
        plan = plan_bus(policy, {}, java=False)
        assert plan.fallback is not None and plan.fallback.kind == "redis"
        assert plan.fallback.how == "missing" and "Redis Streams" in (plan.fallback.note or "")


def test_required_kafka_without_java_fails_before_anything_starts() -> None:
    with pytest.raises(RuntimeError, match="MESH_KAFKA_BOOTSTRAP"):
        plan_bus(KafkaPolicy.REQUIRED, {}, java=False)


def test_only_make_run_degrades_when_kafka_fails_to_start() -> None:
    assert plan_bus(KafkaPolicy.FALLBACK, {}, java=True).degrade_on_failure
    for policy in (KafkaPolicy.IF_JAVA, KafkaPolicy.REQUIRED):
        plan = plan_bus(policy, {}, java=True)
        assert plan.start_kafka and not plan.degrade_on_failure


def test_tests_require_kafka_in_ci_only() -> None:
    assert KafkaPolicy.for_tests(ci=True) is KafkaPolicy.REQUIRED
    assert KafkaPolicy.for_tests(ci=False) is KafkaPolicy.IF_JAVA


def test_mesh_bus_nats_makes_run_start_nats_and_no_kafka() -> None:
    env = {"MESH_BUS": "nats"}
    assert NatsPolicy.for_run(env) is NatsPolicy.REQUIRED
    assert NatsPolicy.for_run({}) is NatsPolicy.OFF
    for policy in (KafkaPolicy.FALLBACK, KafkaPolicy.OFF):
        plan = plan_bus(policy, env, java=True)
        assert plan.nats and not plan.start_kafka
    assert plan_nats(NatsPolicy.REQUIRED, env, binary=True).start
    # Tests keep their Kafka even with MESH_BUS=nats in the shell.
    assert plan_bus(KafkaPolicy.IF_JAVA, env, java=True).start_kafka


def test_a_nats_url_wins_and_a_required_nats_without_the_binary_fails() -> None:
    for policy in NatsPolicy:
        plan = plan_nats(policy, {"MESH_NATS_URL": "nats://n:4222"}, binary=False)
        assert plan.external == "nats://n:4222" and not plan.start
    with pytest.raises(RuntimeError, match="nats-server"):
        plan_nats(NatsPolicy.REQUIRED, {}, binary=False)
    assert not plan_nats(NatsPolicy.IF_AVAILABLE, {}, binary=False).start
    assert not plan_nats(NatsPolicy.OFF, {}, binary=True).start
    assert NatsPolicy.for_tests(ci=True) is NatsPolicy.REQUIRED
    assert NatsPolicy.for_tests(ci=False) is NatsPolicy.IF_AVAILABLE


def test_the_processes_are_told_which_bus() -> None:
    assert BusChoice("nats", "embedded", "nats://127.0.0.1:1").environment() == {
        "MESH_BUS": "nats", "MESH_NATS_URL": "nats://127.0.0.1:1"}
    assert BusChoice("kafka", "embedded", "127.0.0.1:1").environment() == {
        "MESH_KAFKA_BOOTSTRAP": "127.0.0.1:1"}
    gone = failed("java.lang.OutOfMemoryError\n\tat ...", "/x/kafka.log")
    assert gone.environment() == {"MESH_BUS": "redis"}
    assert gone.where == "java.lang.OutOfMemoryError (see /x/kafka.log)"


def test_process_env_drops_a_stale_bootstrap_and_puts_this_venv_first(tmp_path: Path) -> None:
    opts = Options(tmp_path, tmp_path / "Procfile",
                   env={"MESH_KAFKA_BOOTSTRAP": "", "PATH": "/usr/bin", "MESH_BUS": "kafka"})
    env = process_env(opts, {"MESH_DATABASE_URL": "pg", "MESH_BUS": "redis"}, "s3cret")
    assert "MESH_KAFKA_BOOTSTRAP" not in env
    assert env["MESH_BUS"] == "redis" and env["MESH_JWT_SECRET"] == "s3cret"
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)


def test_redact_hides_only_the_password() -> None:
    assert redact("postgresql://u:pw@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert redact("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


# --- ports --------------------------------------------------------------------------------

Addr = namedtuple("Addr", "ip port")
Conn = namedtuple("Conn", "laddr status pid")


def test_listening_pid_reads_only_listening_sockets() -> None:
    rows = [Conn(Addr("127.0.0.1", 8080), psutil.CONN_ESTABLISHED, 11),
            Conn((), psutil.CONN_NONE, 12),
            Conn(Addr("0.0.0.0", 8080), psutil.CONN_LISTEN, 13)]
    assert listening_pid(8080, rows) == 13
    assert listening_pid(9090, rows) is None


def test_worker_metrics_ports_follow_the_procfile_order_web_has_none() -> None:
    assert metrics_ports(["web", "outbox", "push", "cron"]) == {"outbox": 9101, "push": 9102,
                                                                "cron": 9103}


def test_web_address_from_the_procfile_variables() -> None:
    assert web_address({}) == ("127.0.0.1", 8080)
    assert web_address({"MESH_HOST": "0.0.0.0", "PORT": "18080"}) == ("127.0.0.1", 18080)


# --- leftovers ------------------------------------------------------------------------------


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "60"], start_new_session=True)


def test_a_recorded_group_left_running_is_stopped(tmp_path: Path) -> None:
    proc = _sleeper()
    try:
        record_process_group(tmp_path, "web", proc.pid)
        stop_recorded_groups(tmp_path, timeout=10)
        proc.wait(10)  # psutil may have reaped it already: no exit code to compare
        assert not alive(proc.pid)
        assert list(tmp_path.iterdir()) == []
    finally:
        proc.kill()
        proc.wait()


def test_a_record_whose_pid_was_reused_is_never_signalled(tmp_path: Path) -> None:
    proc = _sleeper()
    try:
        started = psutil.Process(proc.pid).create_time()
        (tmp_path / "web.pid").write_text(f"{proc.pid} {started - 3600!r}\n")
        stop_recorded_groups(tmp_path, timeout=10)
        assert alive(proc.pid)
        assert list(tmp_path.iterdir()) == []  # the stale record is gone
    finally:
        proc.kill()
        proc.wait()


# A run that owns a scratch folder, as a test session or bench does, with a real Redis
# started in it the way the stack starts one (its own session: it outlives the run).
_OWNER = """
import sys, time
from pathlib import Path
from devstack.leftovers import scratch_data_dir
from devstack.process import free_port
from devstack.redis import Redis
with scratch_data_dir(sys.argv[1], Path(sys.argv[2])) as root:
    redis = Redis(root / "redis", free_port(), persist=False)
    redis.start()
    print(root, redis.proc.pid, flush=True)
    time.sleep(600)
"""


def _owner(tmp_path: Path, prefix: str) -> tuple[subprocess.Popen[str], Path, int]:
    proc = subprocess.Popen([sys.executable, "-c", _OWNER, prefix, str(tmp_path)],
                            stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parent.parent)
    assert proc.stdout is not None
    root, redis_pid = proc.stdout.readline().split()
    return proc, Path(root), int(redis_pid)


def _kill(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait()


def test_a_killed_runs_folder_and_its_services_are_removed(tmp_path: Path) -> None:
    proc, root, redis_pid = _owner(tmp_path, "mesh-x-")
    try:
        _kill(proc)  # as `timeout` or a closed terminal would: no cleanup runs
        assert alive(redis_pid) and (root / LOCK).read_text().strip()
        assert reap_abandoned(tmp_path, "mesh-x-", timeout=20) == [root]
        assert not alive(redis_pid)
        assert not root.exists()
    finally:
        if alive(redis_pid):
            os.kill(redis_pid, 9)


def test_live_kept_and_unknown_folders_are_left_alone(tmp_path: Path) -> None:
    proc, live, redis_pid = _owner(tmp_path, "mesh-x-")
    try:
        with scratch_data_dir("mesh-x-", tmp_path) as kept:
            pass  # kept on purpose: the folder stays, without its lock file
        setting_up = tmp_path / "mesh-x-setting-up"
        setting_up.mkdir()
        (setting_up / LOCK).write_text("")  # created, its pid not written yet
        unknown = tmp_path / "mesh-x-unknown"
        unknown.mkdir()
        assert reap_abandoned(tmp_path, "mesh-x-", timeout=20) == []
        assert all(p.exists() for p in (live, kept, setting_up, unknown))
        assert alive(redis_pid)
        _kill(proc)  # once its owner dies, the live one is reaped, and only it
        assert reap_abandoned(tmp_path, "mesh-x-", timeout=20) == [live]
        assert not alive(redis_pid)
        assert all(p.exists() for p in (kept, setting_up, unknown))
    finally:
        _kill(proc)
        if alive(redis_pid):
            os.kill(redis_pid, 9)


def test_a_nested_devstack_of_a_killed_run_is_asked_to_stop(tmp_path: Path) -> None:
    outer = tmp_path / "mesh-y-1"
    holder = f"""
import time
from pathlib import Path
from devstack.leftovers import own_data_dir
with own_data_dir(Path({str(outer / "data")!r})):
    print("held", flush=True)
    time.sleep(600)
"""
    outer.mkdir()
    (outer / LOCK).write_text("1\n")  # named a pid, held by nobody: its run died
    inner = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True,
                             cwd=Path(__file__).parent.parent, start_new_session=True)
    try:
        assert inner.stdout is not None and inner.stdout.readline().strip() == "held"
        assert reap_abandoned(tmp_path, "mesh-y-", timeout=20) == [outer]
        inner.wait(20)  # psutil may have reaped it already: no exit code to compare
        assert not alive(inner.pid)
        assert not outer.exists()
    finally:
        _kill(inner)


# --- the supervisor ---------------------------------------------------------------------------


def test_one_process_exiting_stops_the_others_and_its_code_is_returned(tmp_path: Path) -> None:
    out = io.StringIO()
    sup = Supervisor(tmp_path, tmp_path / "processes", stop_timeout=10, out=out)
    env = dict(os.environ)
    sup.add("sleeper", "sleep 60", env)
    sup.add("quitter", "echo ready; exit 3", env)
    assert sup.run() == 3
    assert all(not c.running for c in sup.children)
    lines = out.getvalue().splitlines()
    assert any(line.endswith("quitter | ready") for line in lines), lines
    assert any("quitter exited with 3" in line for line in lines), lines
    assert not list((tmp_path / "processes").glob("*.pid"))  # no stale records


def test_a_child_counts_as_stopped_only_when_its_program_is_gone(tmp_path: Path) -> None:
    """``sh -c`` dies of SIGTERM at once; the program it started may still be
    running (here: it ignores SIGTERM) and must be killed, never left behind."""
    ready = tmp_path / "ready"
    os.mkfifo(ready)
    # The program ignores SIGTERM first, then writes its pid into the FIFO, which
    # the other process waits on before it exits (and the stop begins).
    program = ("import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
               f"open({str(ready)!r}, 'w').write(str(os.getpid())); time.sleep(60)")
    out = io.StringIO()
    sup = Supervisor(tmp_path, tmp_path / "processes", stop_timeout=0.5, out=out)
    sup.add("stubborn", f"{sys.executable} -c \"{program}\"; true", dict(os.environ))
    sup.add("quitter", f"read pid < {ready}; echo $pid > {tmp_path / 'pid'}", dict(os.environ))
    assert sup.run() == 0
    assert "sending SIGKILL to stubborn" in out.getvalue()
    assert not alive(int((tmp_path / "pid").read_text()))
