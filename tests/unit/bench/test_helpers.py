"""The bench's pure helpers (ADR 024): profile summary, service-counter deltas, report compare."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench.client import Client
from bench.compare import change, render, summary
from bench.counters import delta_commands, delta_counts, is_bench_query, parse_commandstats, parse_counts_line
from bench.profile import group_of, module_of, summarize

REPO = Path("/srv/mesh")
SITE = "/srv/mesh/.venv/lib/python3.11/site-packages"
STDLIB = "/usr/lib/python3.11"


def test_modules_site_packages_win_over_the_repo_the_venv_lives_in() -> None:
    assert module_of(f"{SITE}/asyncpg/connection.py", REPO) == "asyncpg"
    assert module_of(f"{SITE}/pydantic_core/core.py", REPO) == "pydantic_core"
    assert module_of("/srv/mesh/app/api/tasks.py", REPO) == "app/api/tasks.py"
    assert module_of(f"{STDLIB}/asyncio/runners.py", REPO) == "asyncio"
    assert module_of(f"{STDLIB}/json/encoder.py", REPO) == "json"
    assert group_of("app/api/tasks.py") == "ours: app/api/tasks.py"
    assert group_of("uvicorn") == "framework: uvicorn/httptools"
    assert group_of("asyncpg") == "asyncpg"
    assert group_of("json") == group_of("orjson") == "json"
    assert group_of("hmac") == "other: hmac"


def test_summary_self_is_the_leaf_and_total_counts_a_frame_once_per_sample() -> None:
    run = f"Runner.run ({STDLIB}/asyncio/runners.py)"
    handler = "create_task (/srv/mesh/app/api/tasks.py)"
    execute = f"Connection.execute ({SITE}/asyncpg/connection.py)"
    recursive = "walk (/srv/mesh/app/x.py)"
    text = "\n".join([
        f"{run};{handler};{execute} 6",
        f"{run};{handler} 2",
        f"{run} 1",                                        # uvloop's C code: no Python frame below
        f"{run};{recursive};{recursive} 1",
        "garbage line without a count",
    ])
    s = summarize(text, REPO)
    assert s.samples == 10
    assert s.self_groups["asyncpg"] == 6
    assert s.self_groups["ours: app/api/tasks.py"] == 2
    assert s.self_groups["event loop (uvloop, C)"] == 1
    assert s.total_groups["ours: app/api/tasks.py"] == 8
    assert s.total_funcs["walk (app/x.py)"] == 1          # twice on one stack, one sample
    assert s.pct(s.self_groups["asyncpg"]) == 60.0


def test_redis_commandstats_delta_leaves_out_our_own_info_calls() -> None:
    before = parse_commandstats({"cmdstat_evalsha": {"calls": 10, "usec": 100},
                                 "cmdstat_info": {"calls": 1, "usec": 5}, "redis_version": "7"})
    after = parse_commandstats({"cmdstat_evalsha": {"calls": 30, "usec": 300},
                                "cmdstat_xadd": {"calls": 5, "usec": 50},
                                "cmdstat_info": {"calls": 2, "usec": 9}})
    assert delta_commands(before, after) == {"evalsha": (20, 200.0), "xadd": (5, 50.0)}


def test_kafka_counts_line_and_delta() -> None:
    before = parse_counts_line("Fetch=4 Produce=10 messages_in=100")
    after = parse_counts_line("Fetch=9 Metadata=1 Produce=14 messages_in=140 junk")
    assert delta_counts(before, after) == {"messages_in": 40, "Fetch": 5, "Produce": 4,
                                           "Metadata": 1}


def test_bench_queries_are_recognised_app_queries_are_not() -> None:
    assert is_bench_query("SELECT EXISTS (SELECT 1 FROM outbox_events) AS bench_probe")
    assert is_bench_query("SELECT pg_stat_statements_reset()")
    assert is_bench_query("ALTER SYSTEM SET pg_stat_statements.track = 'top'")
    assert not is_bench_query("SELECT o.id FROM outbox_events o WHERE o.status = $1")


REPORT = """# Agent Mesh bench — 2026-12-01 ({plan})

| machine | |
|---|---|
| commit | {commit} |

## Summary

| scenario | metric | measured | baseline | ratio | target | verdict |
|---|---|---|---|---|---|---|
| 1. E2E | e2e p50 at 200 msg/s | {p50} ms | 900 ms | 45× | ≤ 10 ms | met |
{extra}
## Method
"""


def test_compare_matches_rows_and_keeps_rows_only_one_side_has() -> None:
    old = REPORT.format(plan="full", commit="aaa", p50="20.0", extra="")
    new = REPORT.format(plan="full", commit="bbb", p50="10.0",
                        extra="| 2c. Profile | web CPU per send | 0.9 ms | | | | — |\n")
    assert summary(new)[("2c. Profile", "web CPU per send")][0] == "0.9 ms"
    text = render(old, new, "old.md", "new.md")
    assert "| commit | aaa | bbb |" in text
    assert "| 1. E2E | e2e p50 at 200 msg/s | 20.0 ms | 10.0 ms | 0.50× |" in text
    assert "| 2c. Profile | web CPU per send | (not in this report) | 0.9 ms |  |" in text


def test_several_runs_a_side_compare_median_to_median() -> None:
    olds = [REPORT.format(plan="full", commit="aaa", p50=p, extra="") for p in ("30.0", "10.0", "20.0")]
    news = [REPORT.format(plan="full", commit="bbb", p50=p, extra="") for p in ("12.0", "9.0", "30.0")]
    text = render(olds, news, "o1, o2, o3", "n1, n2, n3", same_sitting=True)
    assert "3 old and 3 new run(s) in the same sitting" in text
    assert ("| 1. E2E | e2e p50 at 200 msg/s | 20.0 ms [median; runs: 30 · 10 · 20] "
            "| 12.0 ms [median; runs: 12 · 9 · 30] | 0.60× |") in text


def test_change_needs_numbers_in_the_same_unit() -> None:
    assert change("1,000 /s (c=16)", "1,500 /s (c=64)") == "1.50×"
    assert change("2 ms", "3 %") == ""
    assert change("not measured", "3 ms") == ""



async def test_client_sends_requests_to_its_servers_in_turn() -> None:
    """As a router spreads requests over web processes: one request each, in turn,
    on keep-alive connections (two real local servers)."""
    served: list[int] = []

    def handler(tag: int) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    await reader.readuntil(b"\r\n\r\n")
                    served.append(tag)
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            except (asyncio.IncompleteReadError, ConnectionError):
                writer.close()
        return handle

    servers = [await asyncio.start_server(handler(i), "127.0.0.1", 0) for i in range(2)]
    client = Client([f"http://127.0.0.1:{s.sockets[0].getsockname()[1]}" for s in servers])
    try:
        for _ in range(6):
            assert (await client.request("GET", "/", {})).body == b"ok"
    finally:
        client.close()
        for server in servers:
            server.close()
    assert served == [0, 1, 0, 1, 0, 1]


def test_the_report_names_the_bus_the_processes_use_and_why() -> None:
    from app.platform.settings import Settings
    from bench.run import bus_fact

    base = {"database_url": "postgresql://x/y", "redis_url": "redis://x:1"}
    assert bus_fact(Settings(**base, kafka_bootstrap="127.0.0.1:9")) == "Kafka 127.0.0.1:9"
    # Chosen on purpose vs fallen back to: the same bus, a different reason in the report.
    assert "chosen with --bus" in bus_fact(Settings(**base, bus="redis"))
    assert "Java/Maven missing" in bus_fact(Settings(**base))
    assert bus_fact(Settings(**base, bus="nats", nats_url="nats://x:2")).startswith(
        "NATS JetStream nats://x:2")
