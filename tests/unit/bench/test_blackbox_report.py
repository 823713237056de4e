"""The black-box report's best-to-best line (the stricter reading of the ratio target)
and its upkeep lines."""

from __future__ import annotations

import argparse

from bench.blackbox_pg import Upkeep
from bench.blackbox_report import Level, best_to_best, render, upkeep_lines
from bench.scenarios.pgbench import PgbenchRun
from bench.stats import Dist
from bench.wrk_run import WrkRun


def _wrk(connections: int, created: int, p99_ms: float) -> WrkRun:
    return WrkRun(connections=connections, seconds=10.0, requests=created, created=created,
                  refused=0, socket_errors=0, p50_ms=p99_ms / 3, p90_ms=p99_ms / 2,
                  p99_ms=p99_ms, p999_ms=p99_ms, max_ms=p99_ms, client_cpu=0.0, cpu=None)


def _level(run: WrkRun, *, upkeep: Upkeep | None = None, stalls: str = "none",
           pgbench: dict[str, PgbenchRun] | None = None) -> Level:
    return Level(run, run.created, 0.0, 1.0, stalls, upkeep or Upkeep({}, {}), pgbench or {})


def _pg(clients: int, tps: float) -> PgbenchRun:
    return PgbenchRun(clients=clients, tps=tps, latency=Dist.of_seconds([0.001]), failed=0,
                      output="")


def test_the_best_rate_within_the_p99_target_is_set_against_pgbenchs_best_level() -> None:
    runs = [_wrk(16, 14_000, 20.0), _wrk(32, 18_000, 30.0), _wrk(64, 21_000, 70.0)]
    line = best_to_best(runs, [_pg(16, 3_600.0), _pg(32, 3_000.0), _pg(64, 2_500.0)])
    # c=64 is over the p99 target; c=32's 1,800/s against c=16's 3,600 tx/s
    assert "1,800 /s at c=32" in line and "3,600 /s at 16 clients" in line
    assert "0.50×" in line and "met" in line and "missed" not in line


def test_no_level_within_the_p99_target_says_so() -> None:
    line = best_to_best([_wrk(32, 18_000, 60.0)], [_pg(32, 3_000.0)])
    assert line.startswith("No level kept p99 within 50 ms")


def test_a_best_under_half_of_pgbenchs_best_is_missed_even_if_its_own_level_passes() -> None:
    # 1,600/s is 0.53x of pgbench at 32 clients but 0.44x of its best level
    line = best_to_best([_wrk(32, 16_000, 40.0)], [_pg(16, 3_600.0), _pg(32, 3_000.0)])
    assert "0.44×" in line and "**missed**" in line


def test_upkeep_lines_count_what_finished_during_each_run_by_table() -> None:
    start = Upkeep({"tasks": 3, "inbox_events": 1}, {"tasks": 5, "inbox_events": 2})
    after_16 = Upkeep({"tasks": 3, "inbox_events": 1}, {"tasks": 5, "inbox_events": 2})
    after_32 = Upkeep({"tasks": 4, "inbox_events": 1}, {"tasks": 5, "inbox_events": 4},
                      backend_writes=700, evictions=900, reads=50, checkpoints=1,
                      wal_bytes=3 * 2**20)
    lines = upkeep_lines([_level(_wrk(16, 1, 1.0), upkeep=after_16 - start),
                          _level(_wrk(32, 1, 1.0), upkeep=after_32 - after_16)])
    assert lines[-2].startswith("- c=16: autovacuum none; client backends wrote 0 buffers")
    assert lines[-1] == ("- c=32: autovacuum tasks 1 vacuum(s), inbox_events 2 analyze(s); "
                         "client backends wrote 700 buffers, evicted 900, read 50; "
                         "1 checkpoint(s); WAL 3 MB")


def test_a_repeated_level_keeps_its_own_pgbench_and_its_own_stalls() -> None:
    levels = [
        _level(_wrk(32, 15_000, 40.0), upkeep=Upkeep({}, {}, updates=400, hot_updates=300),
               pgbench={"lean": _pg(32, 3_000.0), "split": _pg(32, 2_000.0), "real": _pg(32, 1_500.0)}),
        _level(_wrk(32, 12_000, 80.0), stalls="1, longest 22,125 ms",
               pgbench={"lean": _pg(32, 2_400.0), "split": _pg(32, 1_600.0), "real": _pg(32, 1_200.0)})]
    args = argparse.Namespace(senders=100, recipients=10, seconds=10.0, pgbench_seconds=None,
                              cold=False)
    text = render({}, args, levels, [], "")
    rows = [line for line in text.splitlines() if line.startswith("| 32 | 1,")]
    # 1,500/s against the first level's 3,000 lean tx/s; 1,200/s against the second's 2,400
    assert "| 3,000 | 1,500 | 0.50× | 1.00× |" in rows[0]
    assert "| 2,400 | 1,200 | 0.50× | 1.00× |" in rows[1]
    counted = [line for line in text.splitlines() if line.startswith("| 32 | 1")]
    assert counted[-1].endswith("| 1, longest 22,125 ms |")
    assert "- c=32: 400 updates, 300 HOT (75 %)" in text.splitlines()


def test_the_counted_table_gives_each_levels_sends_per_relay_batch() -> None:
    pgbench = {"lean": _pg(16, 3_000.0), "split": _pg(16, 2_000.0), "real": _pg(16, 1_500.0)}
    level = Level(_wrk(16, 12_000, 20.0), 12_000, 0.0, 2_000.0, "none", Upkeep({}, {}), pgbench,
                  relayed=(12_000, 4_800))
    args = argparse.Namespace(senders=100, recipients=10, seconds=10.0, pgbench_seconds=None,
                              cold=False)
    counted = [line for line in render({}, args, [level], [], "").splitlines()
               if line.startswith("| 16 | 12000 |")]
    # 12,000 creates in 2,000 statements, their rows in 4,800 relay transactions
    assert counted == ["| 16 | 12000 | 12000 | 0 | 0 | 0.0 s | 2,000 | 6.00 | 2.50 | none |"]
