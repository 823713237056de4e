"""The short soak (the long one is ``make soak``): bench/soak_run.py
over the session's services — ~2,000 messages in about a minute among 12 agents
(SSE and long-poll readers, some taken offline and caught up), every fault kind
of the fault suite at least once (relay and push killed, bus stopped 10 s, Redis
flushed and restarted, streams cut, Postgres stopped 10 s and restarted) — then
the same counting as the long run: 0 lost, 0 duplicated, 0 out of order per
recipient, the outbox drained with no dead letters.

RSS and open files are sampled and bounded loosely (a leak per message, request
or reconnect — 2,000 of each — breaks the bound; allocator noise over a minute
does not): the long run's "flat" verdict needs its warm-up and is only reported
here."""

from __future__ import annotations

import pytest

from app.platform.settings import Settings
from bench.soak_report import render, verdict
from bench.soak_run import SoakPlan, faults, run_soak, soak_settings
from devstack.stack import Stack
from tests.support.load import InboxReader, SendLog, tally
from tests.support.meshapi import AgentHandle

MIB = 2**20


@pytest.mark.faults  # `make test` runs it, `make test-fast` skips it
async def test_short_soak_every_fault_no_loss_no_duplicates_in_order(
        migrated: Settings, stack: Stack) -> None:
    if stack.postgres is None:
        pytest.skip("Postgres is not the stack's own (MESH_DATABASE_URL given)")
    bus = "kafka" if migrated.kafka_bootstrap else "redis"
    plan = SoakPlan(seconds=60, rate=40, agents=12, seed=15, scale=1,
                    fault_gap=(1.0, 3.0), offline=(2.0, 5.0), offline_share=0.25,
                    sample_every=1.0, warmup=10.0, heal_timeout=120.0)
    result = await run_soak(plan, soak_settings(migrated, bus), stack)
    report = render(result, {}, "tests/test_soak_short.py")
    ok, why = verdict(result, judge_memory=False)

    assert {f.kind for f in result.faults} == set(faults(1)), report
    assert result.accepted >= 2000, report
    assert result.offline_episodes >= 1, report
    assert {k for k, _ in result.tallies.values()} == {"SSE", "long-poll"}, report
    assert result.delivered_ok, report
    assert sum(t.messages for _, t in result.tallies.values()) == result.accepted
    assert result.outbox["pending"] == 0 and result.outbox["failed"] == 0, report
    assert ok, why
    assert result.sampler is not None
    for slot, samples in result.sampler.series.items():
        life = [s for s in samples if s.pid == samples[-1].pid]
        first, last = life[0], life[-1]
        assert last.fds <= first.fds + 64, (slot, first, last)
        assert last.rss <= 2 * first.rss + 64 * MIB, (slot, first, last)


def _reader(*connections: list[tuple[int, str]]) -> InboxReader:
    reader = InboxReader("http://unused", AgentHandle("r", "key", "kid", None))  # type: ignore[arg-type]
    reader.connections = [[{"seq": seq, "type": "task.created",
                            "payload": {"message": {"message_id": mid}}} for seq, mid in conn]
                          for conn in connections]
    return reader


def test_the_counting_sees_each_defect() -> None:
    """The soak's verdict is only as good as ``tally``: each defect is counted."""
    log = SendLog()
    for i in range(1, 6):
        log.accept(f"m{i}", "r")
    ok = tally(log, _reader([(1, "m1"), (2, "m2")], [(3, "m3"), (4, "m4"), (5, "m5")]), 5)
    assert ok.clean and ok.messages == 5
    resent = tally(log, _reader([(1, "m1"), (2, "m2")], [(2, "m2"), (3, "m3"), (4, "m4"),
                                                         (5, "m5")]), 5)
    assert (resent.duplicated, resent.lost, resent.out_of_order) == (1, 0, 1)
    swapped = tally(log, _reader([(1, "m1"), (3, "m3"), (2, "m2"), (4, "m4"), (5, "m5")]), 5)
    assert swapped.out_of_order and not swapped.lost and not swapped.duplicated
    skipped = tally(log, _reader([(1, "m1"), (2, "m2")], [(4, "m4"), (5, "m5")]), 5)
    assert (skipped.lost, skipped.missing_seqs) == (1, 1) and not skipped.clean
    stored_twice = tally(log, _reader([(1, "m1"), (2, "m2"), (3, "m3"), (4, "m4"), (5, "m5"),
                                       (6, "m5")]), 6)
    assert stored_twice.duplicated == 1
    stranger = tally(log, _reader([(1, "m1"), (2, "m2"), (3, "m3"), (4, "m4"), (5, "m5"),
                                   (6, "x")]), 6)
    assert stranger.unexpected == 1 and not stranger.clean
