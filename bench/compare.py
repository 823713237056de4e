"""Bench reports side by side: ``python bench/compare.py OLD.md NEW.md [--out FILE]``.

``bench/compare.sh`` runs an older commit's bench and this one's in the same
sitting and calls this on the reports. Rows are matched by (scenario, metric) of
the Summary table; a row only one side has (a section the old bench did not have
yet) is listed with the other side empty. Either side may be several reports,
comma-separated (``ROUNDS=3 bench/compare.sh`` interleaves old and new runs): a
cell then shows each run's first number and the change is median ÷ median.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def split_row(line: str) -> list[str]:
    """A markdown table row → its cells (``\\|`` inside a cell is kept)."""
    cells = re.split(r"(?<!\\)\|", line.strip())
    return [c.strip() for c in cells[1:-1]]


def table_after(text: str, heading: str) -> list[list[str]]:
    """The rows (header and separator left out) of the first table after ``heading``."""
    lines = text.splitlines()
    try:
        i = lines.index(heading)
    except ValueError:
        return []
    rows: list[list[str]] = []
    started = False
    for line in lines[i + 1:]:
        if line.startswith("|"):
            started = True
            rows.append(split_row(line))
        elif started:
            break
    return [r for r in rows[1:] if not all(set(c) <= set("-: ") for c in r)]


def summary(text: str) -> dict[tuple[str, str], list[str]]:
    """(scenario, metric) → [measured, baseline, ratio, target, verdict]."""
    return {(r[0], r[1]): r[2:] for r in table_after(text, "## Summary") if len(r) >= 7}


def facts(text: str) -> dict[str, str]:
    rows = table_after(text, text.splitlines()[0]) if text else []
    return {r[0]: r[1] for r in rows if len(r) >= 2}


def first_number(cell: str) -> float | None:
    m = _NUMBER.search(cell)
    return float(m.group().replace(",", "")) if m else None


def change(old: str, new: str) -> str:
    """new ÷ old of the cells' first numbers, when both have one and the same unit."""
    a, b = first_number(old), first_number(new)
    if a is None or b is None or a == 0:
        return ""
    unit_a = _NUMBER.sub("", old.split("(")[0]).strip()
    unit_b = _NUMBER.sub("", new.split("(")[0]).strip()
    if unit_a != unit_b:
        return ""
    return f"{b / a:.2f}×"


def merged(texts: list[str]) -> dict[tuple[str, str], list[str]]:
    """The Summary rows of several runs of one side: one report's rows as they are;
    of several, each row as the run with the median first number has it, followed by
    every run's first number (a row some runs lack — its metric's name changed with
    the outcome — is the median of the runs that have it)."""
    rows = [summary(t) for t in texts]
    if len(rows) == 1:
        return rows[0]
    keys = list(dict.fromkeys(k for r in rows for k in r))
    out: dict[tuple[str, str], list[str]] = {}
    for key in keys:
        cells = [r[key] for r in rows if key in r]
        numbered = [(n, c) for c in cells if (n := first_number(c[0])) is not None]
        if len(numbered) < len(cells):
            out[key] = cells[0]
            continue
        numbered.sort(key=lambda nc: nc[0])
        median = numbered[(len(numbered) - 1) // 2][1]
        runs = " · ".join(f"{first_number(c[0]):g}" for c in cells)
        of = f"{len(cells)} of {len(rows)} runs" if len(cells) < len(rows) else "runs"
        out[key] = [f"{median[0]} [median; {of}: {runs}]", *median[1:]]
    return out


def render(old_text: str | list[str], new_text: str | list[str], old_name: str, new_name: str,
           same_sitting: bool = False) -> str:
    olds = [old_text] if isinstance(old_text, str) else old_text
    news = [new_text] if isinstance(new_text, str) else new_text
    old, new = merged(olds), merged(news)
    fo, fn = facts(olds[0]), facts(news[-1])
    out = [f"# Bench comparison — {fo.get('commit', old_name)} → {fn.get('commit', new_name)}", "",
           (f"{len(olds)} old and {len(news)} new run(s) in the same sitting (bench/compare.sh), "
            "alternating, old first. " if same_sitting
            else "Reports not necessarily from the same sitting: mind the load averages. ")
           + "Change = new ÷ old of the measured cell's first number (lower is better for "
           "latency and CPU, higher for rates); the two full reports are named below.", "",
           "| | old | new |", "|---|---|---|",
           f"| report | `{old_name}` | `{new_name}` |"]
    for key in ("commit", "load average at start (1/5/15 min)", "load average at end (1/5/15 min)",
                "bench duration", "bus", "topology"):
        out.append(f"| {key} | {fo.get(key, '')} | {fn.get(key, '')} |")
    out += ["", "| scenario | metric | old | new | change | target | old verdict | new verdict |",
            "|---|---|---|---|---|---|---|---|"]
    # Scenario by scenario ("1.", "2.", "2c." …); within one, the old report's order.
    keys = sorted(list(old) + [k for k in new if k not in old], key=lambda k: k[0].split(" ")[0])
    for key in keys:
        o, n = old.get(key), new.get(key)
        o_measured, n_measured = (o[0] if o else ""), (n[0] if n else "")
        target = (n or o or ["", "", "", ""])[3]
        out.append(f"| {key[0]} | {key[1]} | {o_measured or '(not in this report)'} "
                   f"| {n_measured or '(not in this report)'} "
                   f"| {change(o_measured, n_measured) if o and n else ''} | {target} "
                   f"| {o[4] if o else ''} | {n[4] if n else ''} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("old", help="the old report, or several comma-separated")
    p.add_argument("new", help="the new report, or several comma-separated")
    p.add_argument("--out", type=Path, help="write here too (default: print only)")
    p.add_argument("--same-sitting", action="store_true",
                   help="say the two runs were made one after the other (bench/compare.sh)")
    args = p.parse_args(argv)
    olds = [Path(f) for f in args.old.split(",")]
    news = [Path(f) for f in args.new.split(",")]
    text = render([f.read_text() for f in olds], [f.read_text() for f in news],
                  ", ".join(f.name for f in olds), ", ".join(f.name for f in news), args.same_sitting)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
