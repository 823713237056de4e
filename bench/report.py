"""The markdown report: one summary table, then a section per scenario."""

from __future__ import annotations

from dataclasses import dataclass, field

MET, MISSED, INFO = "met", "**missed**", "—"


def verdict(ok: bool | None) -> str:
    if ok is None:
        return INFO
    return MET if ok else MISSED


@dataclass
class Row:
    metric: str
    measured: str
    baseline: str = ""
    ratio: str = ""
    target: str = ""
    verdict: str = INFO


@dataclass
class Section:
    title: str
    rows: list[Row] = field(default_factory=list)
    details: list[str] = field(default_factory=list)

    def row(self, *args: str, **kw: str) -> None:
        self.rows.append(Row(*args, **kw))

    def note(self, text: str) -> None:
        self.details.append(text)


def render(title: str, facts: dict[str, str], method: list[str],
           sections: list[Section]) -> str:
    out = [f"# {title}", ""]
    out += ["| machine | |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in facts.items()]
    out += ["", "## Summary", "",
            "| scenario | metric | measured | baseline | ratio | target | verdict |",
            "|---|---|---|---|---|---|---|"]
    for s in sections:
        for r in s.rows:
            out.append(f"| {s.title} | {r.metric} | {r.measured} | {r.baseline} | {r.ratio} "
                       f"| {r.target} | {r.verdict} |")
    out += ["", "## Method", ""] + [f"- {m}" for m in method]
    for s in sections:
        out += ["", f"## {s.title}", ""]
        out += s.details or ["(no details)"]
    return "\n".join(out) + "\n"
