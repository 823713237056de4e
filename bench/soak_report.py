"""The soak's markdown report: plan, faults, per-recipient counts, outbox, RSS/fds."""

from __future__ import annotations

from collections import Counter

from bench.soak_run import SoakResult, faults
from bench.soak_sample import FD_SLACK, OUTBOUND_SLACK, RSS_GROWTH, RSS_SLACK

MIB = 2**20


def verdict(result: SoakResult, judge_memory: bool = True) -> tuple[bool, list[str]]:
    """Passed, and why not: the soak's checks (``judge_memory``: the
    RSS/open-files "flat" verdict too, which needs a long run's warm-up)."""
    why = list(result.problems)
    if result.accepted != result.offered:
        why.append(f"{result.offered - result.accepted} offered sends never accepted")
    t = [tl for _, tl in result.tallies.values()]
    for name in ("lost", "duplicated", "out_of_order", "unexpected", "missing_seqs"):
        n = sum(getattr(x, name) for x in t)
        if n:
            why.append(f"{n} {name.replace('_', ' ')}")
    if any(x.errors for x in t):
        why.append("reader errors")
    if result.outbox.get("pending"):
        why.append(f"{result.outbox['pending']} outbox rows still pending")
    if result.outbox.get("failed"):
        why.append(f"{result.outbox['failed']} dead letters")
    kinds = {f.kind for f in result.faults}
    missing = set(faults(1)) - kinds
    if missing:
        why.append("fault kinds never injected: " + ", ".join(sorted(missing)))
    why += [f"fault {f.kind} at {f.at:.0f} s: {f.error}" for f in result.faults if f.error]
    if judge_memory and result.sampler is not None:
        why += [f"{j.slot}: {j.verdict}" for j in result.sampler.judge(result.plan.warmup)
                if j.verdict.startswith("grew")]
    return not why, why


def render(result: SoakResult, facts: dict[str, str], command: str) -> str:
    p = result.plan
    ok, why = verdict(result)
    lines = [f"# Soak — {'PASSED' if ok else 'FAILED'}", "", f"`{command}`", ""]
    lines += [f"- {k}: {v}" for k, v in facts.items()]
    lines += [f"- bus: {result.bus}; processes: {p.scale} web, {p.scale} outbox relay, "
              f"{p.scale} push worker, 1 cron (the faults' victims are the last of each kind)",
              f"- plan: {p.seconds / 60:g} min at {p.rate:g} msg/s open loop, {p.agents} agents "
              f"(groups of 10 per owner + cross-owner friends), seed {p.seed}; "
              f"{sum(1 for k, _ in result.tallies.values() if k == 'long-poll')} long-poll and "
              f"{sum(1 for k, _ in result.tallies.values() if k == 'SSE')} SSE readers",
              f"- sent: {result.offered:,} offered, {result.accepted:,} accepted in "
              f"{result.seconds:.0f} s "
              f"({result.accepted / max(result.seconds, 1e-9):.1f}/s), {result.retries:,} "
              f"retried requests (same message_id)",
              f"- readers taken offline and caught up: {result.offline_episodes}", ""]
    if why:
        lines += ["## Failures", ""] + [f"- {w}" for w in why] + [""]

    lines += ["## Faults", "", "| # | kind | at (s) | took (s) | result |", "|---|---|---|---|---|"]
    for i, f in enumerate(result.faults, 1):
        lines.append(f"| {i} | {f.kind} | {f.at:.0f} | {f.took:.1f} | {f.error or 'ok'} |")
    per_kind = Counter(f.kind for f in result.faults)
    lines += ["", "Per kind: " + ", ".join(f"{k} ×{n}" for k, n in sorted(per_kind.items())), ""]

    lines += ["## Delivery, per recipient", "",
              "| readers | recipients | messages | events | lost | duplicated | out of order "
              "| unexpected | seqs missing |", "|---|---|---|---|---|---|---|---|---|"]
    for kind in ("SSE", "long-poll"):
        t = [tl for k, tl in result.tallies.values() if k == kind]
        if not t:
            continue
        lines.append(f"| {kind} | {len(t)} | {sum(x.messages for x in t):,} | "
                     f"{sum(x.events for x in t):,} | {sum(x.lost for x in t)} | "
                     f"{sum(x.duplicated for x in t)} | {sum(x.out_of_order for x in t)} | "
                     f"{sum(x.unexpected for x in t)} | {sum(x.missing_seqs for x in t)} |")
    bad = [(a, k, t) for a, (k, t) in result.tallies.items() if not t.clean]
    if bad:
        lines += ["", "Recipients with a defect:", ""]
        lines += [f"- {a} ({k}): {t}" for a, k, t in bad[:20]]
    msgs = sorted(t.messages for _, t in result.tallies.values())
    if msgs:
        lines += ["", f"Messages per recipient: min {msgs[0]}, median {msgs[len(msgs) // 2]}, "
                      f"max {msgs[-1]}."]
    lines += ["", "## Outbox at the end", "",
              ", ".join(f"{k}: {v:,}" for k, v in result.outbox.items()), ""]

    lines += ["## RSS and open files per mesh process", "",
              f"Flat = the last sample is within +{RSS_GROWTH:.0%} + {RSS_SLACK // MIB} MiB "
              f"RSS, +{FD_SLACK} open files other than TCP connections and "
              f"+{OUTBOUND_SLACK} outbound TCP connections (pools grow to the load's peak "
              f"concurrency) of the first sample {p.warmup:g} s after the process's (last) "
              f"start; sampled every {p.sample_every:g} s with psutil (process + children). "
              "Inbound client connections (the load client's keep-alive pool and readers) "
              "are only reported. The end sample is taken after healing, readers still "
              "connected.", "",
              "| process | pids seen | start at (s) | RSS start → end (MiB) | max | files "
              "start → end | max | outbound TCP start → end | max | inbound TCP | verdict |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    if result.sampler is not None:
        for j in result.sampler.judge(p.warmup):
            s, e = j.start, j.end
            if s is None or e is None:
                continue
            conns = f"{s.clients} → {e.clients}" if j.slot.startswith("web") else "—"
            lines.append(f"| {j.slot} | {j.starts} | {s.t:.0f} | {s.rss / MIB:.1f} → "
                         f"{e.rss / MIB:.1f} | {j.rss_max / MIB:.1f} | {s.fds} → {e.fds} | "
                         f"{j.fds_max} | {s.outbound} → {e.outbound} | {j.outbound_max} | "
                         f"{conns} | {j.verdict} |")
    lines.append("")
    return "\n".join(lines)
