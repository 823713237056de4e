"""Modules stay small enough to read in one sitting: at most 400 lines each."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 400


def test_no_module_is_longer_than_the_limit() -> None:
    long = sorted(
        f"{path.relative_to(ROOT)}: {n} lines"
        for folder in ("app", "workers", "cron", "meshd", "devstack")
        for path in (ROOT / folder).rglob("*.py")
        if (n := len(path.read_text().splitlines())) > LIMIT)
    assert long == [], "split these along a seam"
