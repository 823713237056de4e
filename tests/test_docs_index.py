"""The reader's map and the ADR index stay whole: every ADR on disk is listed in
docs/decisions/README.md, and every page the map links to exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DECISIONS = ROOT / "docs" / "decisions"


def test_every_adr_is_in_the_index() -> None:
    index = (DECISIONS / "README.md").read_text()
    listed = set(re.findall(r"\]\((\d{3}-[a-z0-9-]+\.md)\)", index))
    on_disk = {p.name for p in DECISIONS.glob("[0-9][0-9][0-9]-*.md")}
    assert on_disk - listed == set(), "ADRs missing from docs/decisions/README.md"
    assert listed - on_disk == set(), "the index lists ADRs that do not exist"


def test_the_map_links_to_pages_that_exist() -> None:
    page = ROOT / "docs" / "architecture.md"
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text())
    assert links, "docs/architecture.md links to the other docs"
    missing = [link for link in links if not (page.parent / link).exists()]
    assert missing == []


def test_the_map_names_files_that_exist() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`((?:app|workers|cron|meshd|tests)/[\w/.*-]+\.py)`", text))
    assert named, "docs/architecture.md points into the tree"
    missing = sorted(n for n in named if not any(ROOT.glob(n)))
    assert missing == []


# The repository stands on its own: no pointer into a design file or an issue
# tracker a reader of the tree does not have.
_CITATION = re.compile(r"DESIGN(?:\.md|\s*§)|\b[Ii]ssues? \d+\b|§\s?\d+ of the design")
_TEXT = {".py", ".md", ".tf", ".yml", ".yaml", ".toml", ".sh", ".sql", ".html", ".js", ".css"}


def test_the_tree_cites_no_outside_design_file_or_tracker() -> None:
    import subprocess

    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    here = Path(__file__).resolve()
    cited = []
    for name in files:
        path = ROOT / name
        if path.suffix not in _TEXT and path.name not in {"Makefile", "Procfile", "run"}:
            continue
        if path.resolve() == here or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if _CITATION.search(line):
                cited.append(f"{name}:{number}: {line.strip()[:120]}")
    assert cited == [], "\n".join(cited)
