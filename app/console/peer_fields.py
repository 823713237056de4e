"""Fields a peer wrote, made safe to show: whatever another agent put in a
message is data of any JSON shape, never something a page may trust.

Two rules, one per kind of field:

* run facts (``metadata.mesh_run``, written by the sender's runtime): a figure is
  shown only when it is a finite, non-negative number below a sane bound, a word
  only when it is a short string; anything else shows as "—" and adds nothing to
  the task's totals. The raw metadata is still shown, as escaped JSON. A message
  posted mid-run carries its run's ``run_id`` but no final figures; the run's
  closing message (same sender, same ``run_id``) does, and the page shows those on
  every message of the run and counts each run once (ADR 037).
* file links (``file.uri``): a link only for ``http:`` and ``https:``; every other
  scheme (``javascript:``, ``data:``, ``vbscript:``, ``file:`` …, in any case and
  with any leading blanks or control characters a browser would skip) is text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

# Past this a figure is a prank, not a run: no run costs a million dollars or
# takes ten million turns; showing it would only make the totals lie.
MAX_COST_USD = 1_000_000.0
MAX_TURNS = 10_000_000
MAX_WORD = 40
MAX_RUN_ID = 200
LINK_SCHEMES = frozenset({"http", "https"})


@dataclass(frozen=True)
class RunFacts:
    outcome: str | None
    cost_usd: float | None
    turns: int | None
    run_id: str | None = None

    @property
    def final(self) -> bool:
        """Whether these are a finished run's figures (mid-run messages carry none)."""
        return self.cost_usd is not None or self.turns is not None


def _number(value: Any, bound: float) -> float | None:
    # bool is an int to Python, not a figure to a reader.
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer past what a float holds
        return None
    if not math.isfinite(number) or number < 0 or number > bound:
        return None
    return number


def run_facts(metadata: Any) -> RunFacts | None:
    """The run facts of one message, each ``None`` when not a plausible value;
    ``None`` when the message carries no ``mesh_run`` object at all."""
    if not isinstance(metadata, dict):
        return None
    run = metadata.get("mesh_run")
    if not isinstance(run, dict):
        return None
    outcome = run.get("outcome")
    cost = _number(run.get("cost_usd"), MAX_COST_USD)
    turns = _number(run.get("turns"), MAX_TURNS)
    run_id = run.get("run_id")
    return RunFacts(
        outcome=outcome[:MAX_WORD] if isinstance(outcome, str) and outcome else None,
        cost_usd=cost,
        turns=int(turns) if turns is not None and turns == int(turns) else None,
        run_id=run_id[:MAX_RUN_ID] if isinstance(run_id, str) and run_id else None,
    )


def task_runs(messages: list[tuple[str, Any]]) -> tuple[list[RunFacts | None], dict[str, Any]]:
    """Per message (``(sender, metadata)``) the figures to show, and the task's totals.

    A message of a run shows that run's final figures, found on a message of the
    same sender with the same ``run_id`` (a peer cannot set another agent's
    figures); a run is summed once however many messages it posted."""
    facts = [run_facts(meta) for _, meta in messages]
    finals: dict[tuple[str, str], RunFacts] = {}
    for (sender, _), f in zip(messages, facts, strict=True):
        if f is not None and f.run_id is not None and f.final:
            finals[(sender, f.run_id)] = f  # the latest try of a run counts
    shown: list[RunFacts | None] = []
    counted: list[RunFacts] = []
    seen: set[tuple[str, str]] = set()
    for (sender, _), f in zip(messages, facts, strict=True):
        if f is None or f.run_id is None:
            shown.append(f)
            if f is not None:
                counted.append(f)  # figures without a run id: each message is its own run
            continue
        key = (sender, f.run_id)
        final = finals.get(key)
        shown.append(final or f)
        if key not in seen:
            seen.add(key)
            counted.append(final or f)
    return shown, {"runs": counted,
                   "cost_usd": round(sum(r.cost_usd or 0.0 for r in counted), 6),
                   "turns": sum(r.turns or 0 for r in counted)}


def link_uri(uri: Any) -> str | None:
    """``uri`` when it may be an ``<a href>`` (http or https with a host), else ``None``."""
    if not isinstance(uri, str):
        return None
    # Browsers strip leading C0 controls and spaces and drop tabs and newlines
    # anywhere before they read the scheme: judge the string they would read.
    seen = "".join(ch for ch in uri.lstrip("".join(map(chr, range(0x21))))
                   if ch not in "\t\n\r")
    try:
        parts = urlsplit(seen)
    except ValueError:
        return None
    if parts.scheme.lower() not in LINK_SCHEMES or not parts.netloc:
        return None
    return seen
