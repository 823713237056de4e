"""Reading wrk's result line (bench/wrk/send.lua's ``done``)."""

from __future__ import annotations

import pytest

from bench.wrk_run import parse

LINE = ('WRK_RESULT {"requests":1200,"duration_us":2000000,"created":1190,"refused":10,'
        '"connect_errors":1,"read_errors":2,"write_errors":0,"timeouts":3,"p50_us":8000,'
        '"p90_us":15000,"p99_us":42000,"p999_us":60000,"max_us":81000,"mean_us":9100.5}')


def test_the_result_line_gives_rates_and_latencies_in_ms() -> None:
    run = parse("Running 2s test @ http://x\n  2 threads\n" + LINE + "\n", connections=16)
    assert run.created == 1190 and run.refused == 10 and run.socket_errors == 6
    assert run.rate == 595.0
    assert (run.p50_ms, run.p99_ms, run.max_ms) == (8.0, 42.0, 81.0)


def test_output_without_the_line_is_an_error_with_the_output() -> None:
    with pytest.raises(RuntimeError, match="unable to connect"):
        parse("unable to connect to 127.0.0.1:1 Connection refused", connections=1)
