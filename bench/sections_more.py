"""Report sections for the measuring items of ADR 024: where a send goes
(profile + counters) and scale-out on one machine (1 vs 2 of each process); the
floor of a request; webhook delivery (ADR 035)."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from pathlib import Path

from app.delivery.webhook_signing import Sealer
from bench.client import Client
from bench.cpu import Measure
from bench.env import Env
from bench.plan import Plan
from bench.profile import Summary
from bench.report import Section, verdict
from bench.scenarios import floor, latency, sends, webhooks
from bench.scenarios import profile as profile_run
from bench.sections import cpu_note, ms, procs_of, redis_note
from bench.stats import fmt, fmt_ratio
from bench.topology import Topology


def _cell(text: str, width: int = 110) -> str:
    one = " ".join(text.split())
    one = one if len(one) <= width else one[:width - 1] + "…"
    return "`" + one.replace("|", "\\|").replace("`", "'") + "`"


def _profile_tables(sec: Section, prof: Summary, web_ms: float) -> None:
    sec.note(f"\n**Web process, by group** ({prof.samples:,} busy samples; self = innermost "
             f"frame, total = anywhere on the stack; CPU-ms per send = self share × "
             f"{fmt(web_ms)} web CPU-ms per send):")
    sec.note("")
    sec.note("| group | self % | self CPU-ms per send | total % |")
    sec.note("|---|---|---|---|")
    for group, n in prof.self_groups.most_common():
        sec.note(f"| {group} | {fmt(prof.pct(n), '%')} | {fmt(web_ms * n / prof.samples)} "
                 f"| {fmt(prof.pct(prof.total_groups[group]), '%')} |")
    sec.note("\n**Top functions by self %:**")
    sec.note("")
    sec.note("| function (module) | self % | total % |")
    sec.note("|---|---|---|")
    for name, n in prof.self_funcs.most_common(20):
        sec.note(f"| {_cell(name)} | {fmt(prof.pct(n), '%')} "
                 f"| {fmt(prof.pct(prof.total_funcs[name]), '%')} |")
    sec.note("\n**Top functions by total %** (frames on every stack — the loop, "
             "uvicorn's entry — left out):")
    sec.note("")
    sec.note("| function (module) | total % | self % |")
    sec.note("|---|---|---|")
    shown = 0
    top = max(prof.total_funcs.values(), default=0)
    for name, n in prof.total_funcs.most_common():
        if n >= 0.97 * top:
            continue
        sec.note(f"| {_cell(name)} | {fmt(prof.pct(n), '%')} "
                 f"| {fmt(prof.pct(prof.self_funcs[name]), '%')} |")
        shown += 1
        if shown == 20:
            break


async def s_profile(env: Env, ctx: dict, plan: Plan) -> Section:  # type: ignore[type-arg]
    sec = Section("2c. Where a send goes (web profile, statements, calls per send)")
    topo: Topology = ctx["topology"]
    r = await profile_run.run(env, topo, ctx["sends_cast"], concurrency=plan.profile_concurrency,
                              seconds=plan.profile_seconds, rate=plan.profile_rate)
    load, n = r.run, r.run.accepted
    sec.note(f"One more closed-loop `sends` run (c={plan.profile_concurrency}, "
             f"{plan.profile_seconds:g} s, {len(ctx['sends_cast'].senders)} senders × "
             f"{len(ctx['sends_cast'].recipients)} recipients, topology {topo.size}): "
             f"{n:,} accepted sends, {fmt(load.rate, '/s')}, API p50 {ms(load.dist, 'p50')} / "
             f"p99 {ms(load.dist, 'p99')}, {len(load.errors)} errors. Service counters over "
             f"{fmt(r.counted_seconds, 's')} (the load, the relay's drain and 1 s more); the "
             "profile over the load only. Method: ADR 024.")
    cpu = load.cpu
    web_ms = math.nan
    if cpu is not None and n:
        web_ms = 1000 * cpu.usage["web"].cpu / (n * r.web_share)
    # --- the web profile
    if r.profile is not None and r.profile.samples:
        stem = ctx.get("artifact_stem")
        note = ""
        if stem and r.raw is not None:
            dest = Path(ctx["results_dir"]) / f"{stem}.web-profile.txt.gz"
            ctx.setdefault("artifacts", []).append((r.raw, dest))
            note = f"; raw stacks: `{dest.name}` (py-spy collapsed stacks, gzip)"
        ours = sum(v for k, v in r.profile.self_groups.items() if k.startswith("ours:"))
        sec.row("web CPU per send (py-spy sampled, first web process)", fmt(web_ms, "ms"),
                "", "", "", verdict(None))
        sec.row("… of which our code (app/, self time)", fmt(r.profile.pct(ours), "%"), "", "",
                "", verdict(None))
        wall = cpu.wall if cpu is not None else math.nan
        sec.note(f"\npy-spy {plan.profile_rate} Hz, `--nonblocking`, on web pid "
                 f"{topo.web.proc.pid if topo.web.proc else '?'}{note}. Busy samples "
                 f"{fmt(100 * r.profile.samples / (plan.profile_rate * wall), '%')} of the "
                 f"samples possible vs web CPU {fmt(cpu.share('web')[0] if cpu else math.nan, '%')}"
                 " of a core: py-spy counts a thread that is runnable but waiting for a core as "
                 "busy, so on a loaded machine the shares include run-queue time (close to CPU "
                 "shares, as a preempted thread waits where it ran; waits right after a wake-up "
                 "inflate \"event loop\").")
        _profile_tables(sec, r.profile, web_ms)
    else:
        sec.row("web CPU per send (py-spy)", "not measured", "", "", "", verdict(None))
        sec.note(f"\nWeb profile not taken: {r.why_not.get('profile', 'no samples')}")
    # --- Postgres
    if r.pg is not None and n:
        pg = r.pg
        begin, commit = pg.calls_of("BEGIN", "START"), pg.calls_of("COMMIT", "ROLLBACK")
        sec.row("Postgres statements per send (pg_stat_statements, BEGIN/COMMIT included)",
                fmt(pg.calls / n), "", "", "", verdict(None))
        sec.row("Postgres explicit transactions (BEGIN) per send", fmt(begin / n), "", "", "",
                verdict(None))
        sec.note(f"\n**Postgres** — {pg.calls:,} statement executions for {n:,} sends "
                 f"= **{fmt(pg.calls / n)} per send**, of which BEGIN {fmt(begin / n)} and "
                 f"COMMIT/ROLLBACK {fmt(commit / n)} per send (a statement outside BEGIN is a "
                 "transaction of its own). Round trips ≈ statement executions: asyncpg sends "
                 "each execution (Bind/Execute/Sync of a cached prepared statement) and "
                 "BEGIN/COMMIT as one round "
                 "trip each; a pipelined `executemany` is several executions in one round trip "
                 "and a first-time Prepare one more, so this count is an upper bound within a "
                 "few %. Whole pipeline: web, relay and push statements together.")
        for title, key in (("by calls", lambda s: -s.calls), ("by total time", lambda s: -s.total_ms)):
            sec.note(f"\nTop 10 statements {title}:")
            sec.note("")
            sec.note("| statement | calls per send | mean ms | total ms per send | rows per call |")
            sec.note("|---|---|---|---|---|")
            for s in sorted(pg.statements, key=key)[:10]:
                sec.note(f"| {_cell(s.query)} | {fmt(s.calls / n)} | {fmt(s.total_ms / s.calls, '', 3)} "
                         f"| {fmt(s.total_ms / n, '', 3)} | {fmt(s.rows / s.calls)} |")
    # --- Redis
    if r.redis is not None and n:
        per_send = redis_note(sec, r.redis, n, "during the profiled run")
        sec.row("Redis commands per send (INFO commandstats)", fmt(per_send), "", "", "",
                verdict(None))
    # --- Kafka
    if r.kafka is not None and n:
        k = r.kafka
        produce, fetch = k.get("Produce", 0), k.get("Fetch", 0)
        sec.row("Kafka produce / fetch requests per send (broker JMX)",
                f"{fmt(produce / n)} / {fmt(fetch / n)}", "", "", "", verdict(None))
        sec.note(f"\n**Kafka** (the broker's `RequestMetrics` counts over JMX) — Produce "
                 f"{produce:,} = {fmt(produce / n)} per send, Fetch {fmt(fetch / n)} per send, "
                 f"{k.get('messages_in', 0):,} records in "
                 f"({fmt(k.get('messages_in', 0) / produce if produce else math.nan)} per produce "
                 "request). Fetches include the consumers' long polls, which run at a fixed "
                 "rate when idle:")
        sec.note("")
        sec.note("| request | count | per send | per second |")
        sec.note("|---|---|---|---|")
        for name, count in k.items():
            sec.note(f"| {name} | {count:,} | {fmt(count / n)} | {fmt(count / r.counted_seconds)} |")
    else:
        sec.row("Kafka requests per send", "not measured", "", "", "", verdict(None))
        sec.note(f"\nKafka not counted: {r.why_not.get('kafka', '?')}")
    sec.note("\nCPU during the profiled run (py-spy's own CPU is its own row):")
    cpu_note(sec, cpu, n, "send")
    return sec


async def s_scaleout(env: Env, ctx: dict, plan: Plan) -> Section:  # type: ignore[type-arg]
    sec = Section("2d. Scale-out on one machine")
    topo: Topology = ctx["topology"]
    original = topo.size
    db, topic = env.settings.database_url, env.settings.bus_topic
    c = max(plan.sweep)
    levels: dict[int, tuple[sends.SendsRun, latency.LatencyRun]] = {}
    try:
        for k in plan.scaleout_sizes:
            await topo.resize(env, k)
            client = Client(topo.urls)
            await sends.run(client, ctx["sends_cast"], concurrency=c, seconds=1.5)   # warm-up
            await latency.run(topo.urls, db, ctx["latency_cast"], client, rate=plan.rate,
                              seconds=1.0, settle=5.0)
            thr = await sends.run(client, ctx["sends_cast"], concurrency=c,
                                  seconds=plan.scaleout_seconds, database_url=db, topic=topic,
                                  meter=env.meter(procs_of(ctx)))
            await client.prewarm(16)
            lat = await latency.run(topo.urls, db, ctx["latency_cast"], client, rate=plan.rate,
                                    seconds=plan.scaleout_latency_seconds, settle=10.0,
                                    meter=env.meter(procs_of(ctx)))
            client.close()
            levels[k] = (thr, lat)
    finally:
        await topo.resize(env, original)
    one, *more = sorted(levels)
    t1, l1 = levels[one]
    for k in more:
        tk, lk = levels[k]
        sec.row(f"accepted sends/s, {k} vs {one} of each (closed loop c={c})",
                f"{fmt(tk.rate, '/s')} (p99 {ms(tk.dist, 'p99')})",
                f"{fmt(t1.rate, '/s')} (p99 {ms(t1.dist, 'p99')})", fmt_ratio(tk.rate / t1.rate),
                "more with more processes", verdict(None))
        sec.row(f"e2e p50 / p99 at {plan.rate:g} msg/s, {k} vs {one} of each",
                f"{ms(lk.e2e_dist, 'p50')} / {ms(lk.e2e_dist, 'p99')}",
                f"{ms(l1.e2e_dist, 'p50')} / {ms(l1.e2e_dist, 'p99')}",
                fmt_ratio(l1.e2e_dist.p50 / lk.e2e_dist.p50) + " (p50)", "p50 ≤ 10 ms, p99 ≤ 50 ms",
                verdict(lk.e2e_dist.p50 <= 10 and lk.e2e_dist.p99 <= 50))
        if tk.cpu is not None and t1.cpu is not None and tk.accepted and t1.accepted:
            ck, c1 = 1000 * tk.cpu.ours / tk.accepted, 1000 * t1.cpu.ours / t1.accepted
            sec.row(f"CPU per send (closed loop), {k} vs {one} of each", fmt(ck, "ms"), fmt(c1, "ms"),
                    fmt_ratio(ck / c1) + " the CPU", "", verdict(None))
    sec.note(f"The same run, {' then '.join(str(k) for k in sorted(levels))} of each mesh process "
             "(web, outbox, push: the Procfile commands with the same settings; each web "
             "process a uvicorn single worker on its own port). The load client spreads "
             "requests over the web processes round robin per request and the SSE streams "
             "round robin per recipient, as a PaaS router would. Per level: a closed loop of "
             f"{c} in flight for {plan.scaleout_seconds:g} s (scenario 2's cast), then the open "
             f"loop at {plan.rate:g} msg/s for {plan.scaleout_latency_seconds:g} s (scenario 1's "
             "cast); a short warm-up before each. Delivered / missing / dup / out of order "
             "(an SSE event whose `id` (the inbox seq) is not above its stream's previous "
             "one) check exactly once, in order, per recipient with each topology. Two cores: "
             "a second process of each can only help where one process of a kind was the "
             "bottleneck with a core to spare.")
    sec.note("")
    sec.note("| of each | accepted/s | API p50 | API p99 | errors | outbox backlog at end "
             "| drain after | e2e p50 | e2e p90 | e2e p99 | delivery p50 | delivered | missing "
             "| dup | out of order | CPU ms per send (closed loop) |")
    sec.note("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for k in sorted(levels):
        t, lt = levels[k]
        cpu_ms = 1000 * t.cpu.ours / t.accepted if t.cpu is not None and t.accepted else math.nan
        sec.note(f"| {k} | {fmt(t.rate)} | {ms(t.dist, 'p50')} | {ms(t.dist, 'p99')} "
                 f"| {len(t.errors)} | {t.backlog_after} | {fmt(t.drain_seconds, 's')} "
                 f"| {ms(lt.e2e_dist, 'p50')} | {ms(lt.e2e_dist, 'p90')} | {ms(lt.e2e_dist, 'p99')} "
                 f"| {ms(lt.pipeline_dist, 'p50')} | {len(lt.e2e)} | {lt.missing} | {lt.duplicates} "
                 f"| {lt.reordered} | {fmt(cpu_ms)} |")
    for k in sorted(levels):
        t, lt = levels[k]
        for label, errs in (("closed loop", t.errors), ("open loop", lt.errors)):
            if errs:
                sec.note(f"\n{k} of each, {label}: {len(errs)} errors, first: `{errs[0]}`")
        sec.note(f"\nCPU by process, {k} of each, closed loop:")
        cpu_note(sec, t.cpu, t.accepted, "send")
        sec.note(f"\nCPU by process, {k} of each, open loop at {plan.rate:g} msg/s (every send "
                 "nearly alone: the wake-ups a send costs each process):")
        cpu_note(sec, lt.cpu, lt.accepted, "send")
    return sec


# A send's hops (ADR 029), counted on the floor's unit costs: (what, count, unit, per
# claim). "Per claim" hops are shared by the sends one relay claim carries (two at
# 200 msg/s with the linger); the others are paid by every send. Kafka's produce and
# fetch have no floor here: the relay's and push worker's Kafka clients and the
# broker are measured, not estimated.
SEND_HOPS: tuple[tuple[str, str, int, str, bool], ...] = (
    # (process, what, count, unit cost, per claim)
    ("web", "the request itself", 1, "bare", False),
    ("web", "rate-limit script, commit notices (+ the relays' wake-up), SSE read (Redis)", 3,
     "redis caller", False),
    ("web", "the create (Postgres)", 1, "postgres caller", False),
    ("Postgres", "the create", 1, "postgres server", False),
    ("Redis", "the web's three calls", 3, "redis server", False),
    ("relay", "BEGIN, claim, sent mark, COMMIT (Postgres)", 4, "postgres caller", True),
    ("Postgres", "the relay's four statements", 4, "postgres server", True),
    ("push worker", "one pipeline (Redis, both ends)", 1, "redis both", True),
)


def _trip_cost(runs: dict[str, floor.FloorRun], trip: str,
               measure: Callable[[floor.FloorRun], float]) -> float:
    """What one ``trip`` ("redis" or "postgres") adds to ``measure``: the mean of the
    two differences the 2×2 runs give (with it − without it, the other trip absent,
    then present), which halves the noise of one subtraction."""
    other = "postgres" if trip == "redis" else "redis"
    pairs = ((trip, "bare"), ("redis+postgres", other))
    return sum(measure(runs[with_it]) - measure(runs[without]) for with_it, without in pairs) / 2


def _round_trip_costs(runs: dict[str, floor.FloorRun]) -> dict[str, float]:
    """The unit costs SEND_HOPS names, in CPU-ms."""
    out = {"bare": runs["bare"].server_ms}
    for trip in ("redis", "postgres"):
        out[f"{trip} caller"] = _trip_cost(runs, trip, lambda r: r.server_ms)
        out[f"{trip} server"] = _trip_cost(runs, trip, lambda r, t=trip: r.services_ms[t])
    out["redis both"] = out["redis caller"] + out["redis server"]
    return out


def hops_floor(unit: dict[str, float], per_claim: float, process: str | None = None) -> float:
    """CPU-ms per send of SEND_HOPS (of ``process`` only, if given) when one claim
    carries ``per_claim`` sends."""
    return sum(n * unit[kind] / (per_claim if shared else 1.0)
               for who, _, n, kind, shared in SEND_HOPS if process in (None, who))


async def s_floor(env: Env, ctx: dict, plan: Plan) -> Section:  # type: ignore[type-arg]
    sec = Section("1b. The floor: a lone request on the web's stack")
    meter = env.meter({})
    runs = await floor.run(env.settings.database_url, str(env.settings.redis_url), meter,
                           rate=plan.rate, seconds=plan.floor_seconds)
    unit = _round_trip_costs(runs)
    sec.row(f"CPU per lone request at {plan.rate:g}/s, bare uvicorn + orjson (no app code)",
            fmt(unit["bare"], "ms"), "", "", "", verdict(None))
    sec.row("one Redis round trip: calling process / Redis",
            f"{fmt(unit['redis caller'], 'ms')} / {fmt(unit['redis server'], 'ms')}",
            "", "", "", verdict(None))
    sec.row("one Postgres round trip: calling process / Postgres",
            f"{fmt(unit['postgres caller'], 'ms')} / {fmt(unit['postgres server'], 'ms')}",
            "", "", "", verdict(None))
    web_floor = hops_floor(unit, 1.0, "web")
    alone, pairs = hops_floor(unit, 1.0), hops_floor(unit, 2.0)
    sec.row("the floor of a send's hops without Kafka: every event alone / two per claim",
            f"{fmt(alone, 'ms')} / {fmt(pairs, 'ms')}", "", "", "", verdict(None))
    measured = ctx.get("latency_cpu")
    if measured is not None:
        cpu, n = measured
        web = cpu.per(n, "web")
        sec.row("web CPU per send (latency run) vs its hops on the bare stack",
                fmt(web, "ms"), fmt(web_floor, "ms"), fmt_ratio(web / web_floor) + " the floor",
                "", verdict(None))
        no_kafka = 1000 * cpu.pipeline / n - cpu.per(n, "kafka")
        sec.row("pipeline CPU per send without the broker (latency run) vs the floor, two "
                "per claim", fmt(no_kafka, "ms"), fmt(pairs, "ms"),
                fmt_ratio(no_kafka / pairs) + " the floor", "", verdict(None))
    sec.note(f"A bare ASGI app (bench/floor_app.py) on the web's uvicorn, driven open loop "
             f"at {plan.rate:g} requests/s for {plan.floor_seconds:g} s per mode with the "
             "send's body; CPU per request of the server process and of the services, from "
             "psutil. A round trip's cost: the mean of its two differences in the 2×2 runs.")
    sec.note("")
    sec.note("| mode | requests | server CPU-ms per request | Postgres | Redis "
             "| load client | errors |")
    sec.note("|---|---|---|---|---|---|---|")
    for r in runs.values():
        sec.note(f"| {r.mode} | {r.requests} | {fmt(r.server_ms)} "
                 f"| {fmt(r.services_ms.get('postgres', math.nan))} "
                 f"| {fmt(r.services_ms.get('redis', math.nan))} | {fmt(r.client_ms)} "
                 f"| {r.errors} |")
    sec.note("\nA send's hops on these unit costs (Kafka's produce and fetch not included: "
             "the relay's and push worker's measured CPU includes their Kafka clients, the "
             "floor does not; per-claim hops are shared by the sends one claim carries):\n")
    sec.note("| hop | count | CPU-ms each | per claim | CPU-ms per send, alone |")
    sec.note("|---|---|---|---|---|")
    for who, what, count, kind, shared in SEND_HOPS:
        sec.note(f"| {who}: {what} | {count} | {fmt(unit[kind])} | {'yes' if shared else ''} "
                 f"| {fmt(count * unit[kind])} |")
    sec.note(f"| **the floor of a send's hops, alone / two per claim** | | | "
             f"| **{fmt(alone)} / {fmt(pairs)}** |")
    return sec

async def s_webhooks(env: Env, ctx: dict, plan: Plan) -> Section:  # type: ignore[type-arg]
    sec = Section("7. Webhook delivery (one webhook process)")
    topo: Topology = ctx["topology"]
    db, redis_url = env.settings.database_url, env.settings.redis_url
    sealer = Sealer.from_settings(env.settings)
    proc = await env.process("webhook", env.variant(webhook_allow_private=True,
                                                    webhook_sweep_seconds=1.0))
    client = Client(topo.urls)
    try:
        await client.prewarm(16)
        cast = ctx["sends_cast"]
        filled = await webhooks.fill(client, cast, plan.webhook_fill)
        meter = env.meter({**procs_of(ctx), "webhook": proc})
        measure = Measure(meter)
        with measure:
            thr = await webhooks.throughput(db, redis_url, sealer, cast.recipients)
        cpu = measure.result
        bodies = await webhooks.sample_bodies(db, 500)
        bodies = (bodies * (thr.events // max(len(bodies), 1) + 1))[:thr.events]
        floor_run = await webhooks.post_floor(bodies, len(cast.recipients))

        lat_cast = ctx["latency_cast"]
        sse = await latency.run(topo.urls, db, lat_cast, client, rate=plan.rate,
                                seconds=plan.webhook_seconds, settle=15.0)
        hooked = await webhooks.latency(db, redis_url, sealer, lat_cast, client,
                                        rate=plan.rate, seconds=plan.webhook_seconds)
    finally:
        client.close()
        await env.stop(proc)

    sec.row("webhook deliveries/s, one process", fmt(thr.rate, "/s"),
            fmt(floor_run.rate, "/s") + " (bare POSTs)", fmt_ratio(thr.rate / floor_run.rate)
            + " of the floor", "≥ 2,000/s", verdict(thr.rate >= 2000))
    w, s_ = hooked.e2e_dist, sse.e2e_dist
    sec.row(f"e2e send → webhook p50 at {plan.rate:g} msg/s", ms(w, "p50"),
            ms(s_, "p50") + " (SSE)", fmt_ratio(s_.p50 / w.p50), "", verdict(None))
    sec.row(f"e2e send → webhook p99 at {plan.rate:g} msg/s", ms(w, "p99"),
            ms(s_, "p99") + " (SSE)", fmt_ratio(s_.p99 / w.p99), "≤ 50 ms",
            verdict(w.p99 <= 50))
    sec.note(f"Throughput: {len(cast.recipients)} recipients, {filled} sends queued "
             f"({thr.events} inbox events, the friendships' included) before their webhooks "
             "were registered in one transaction; the clock ran from that commit until "
             "every acked cursor reached its inbox (each POST signed, each 2xx acked, in "
             f"order per agent). Took {fmt(thr.seconds, 's')}; the receiver counted "
             f"{thr.received} POSTs, {thr.reordered} out of order. Floor: the same number of "
             f"bodies POSTed straight from the bench process to the same receiver over "
             f"{len(cast.recipients)} keep-alive lanes, one request in flight each "
             f"({fmt(floor_run.seconds, 's')}).")
    sec.note("")
    sec.note(f"Latency: {len(lat_cast.senders)} senders → {len(lat_cast.recipients)} "
             f"recipients, open loop at {plan.rate:g} msg/s for {plan.webhook_seconds:g} s, "
             "first on SSE (the baseline), then the same recipients by webhook. "
             "e2e = the receiver read the POST − the send was written.")
    sec.note("")
    sec.note("| run | offered | accepted | delivered | missing | dup | reordered | e2e p50 "
             "| p90 | p99 | max |")
    sec.note("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, run, d in (("SSE", sse, s_), ("webhook", hooked, w)):
        sec.note(f"| {name} | {run.offered} | {run.accepted} | {d.n} | {run.missing} "
                 f"| {run.duplicates} | {run.reordered} | {ms(d, 'p50')} | {ms(d, 'p90')} "
                 f"| {ms(d, 'p99')} | {ms(d, 'max')} |")
    cpu_note(sec, cpu, thr.events, "webhook POST")
    return sec


RUNNERS: dict[str, Callable[[Env, dict, Plan], Awaitable[Section]]] = {  # type: ignore[type-arg]
    "floor": s_floor, "profile": s_profile, "scaleout": s_scaleout, "webhooks": s_webhooks,
}
