"""Fields a peer wrote, made safe to show: whatever another agent put in a
message is data of any JSON shape, never something a page may trust.

Two rules, one per kind of field:

* run facts (``metadata.mesh_run``, written by the sender's runtime): a figure is
  shown only when it is a finite, non-negative number below a sane bound, a word
  only when it is a short string; anything else shows as "—" and adds nothing to
  the task's totals. The raw metadata is still shown, as escaped JSON.
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
LINK_SCHEMES = frozenset({"http", "https"})


@dataclass(frozen=True)
class RunFacts:
    outcome: str | None
    cost_usd: float | None
    turns: int | None


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
    return RunFacts(
        outcome=outcome[:MAX_WORD] if isinstance(outcome, str) and outcome else None,
        cost_usd=cost,
        turns=int(turns) if turns is not None and turns == int(turns) else None,
    )


def run_totals(runs: list[RunFacts | None]) -> dict[str, Any]:
    """Cost and turns summed over the plausible figures; ``runs`` counts the
    messages that carried run facts at all."""
    present = [r for r in runs if r is not None]
    return {"runs": present,
            "cost_usd": round(sum(r.cost_usd or 0.0 for r in present), 6),
            "turns": sum(r.turns or 0 for r in present)}


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
