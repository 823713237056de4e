"""Counters of the policies: each guard and label that fired, in the log and a file.

``mesh agent`` has no metrics port; every count is logged as it changes
(``policy metric NAME=N``) and kept in ``STATE_DIR/policy-metrics.json`` (written
atomically) so an operator or a test reads the totals without parsing logs.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

from meshd.files import atomic_write_json

log = logging.getLogger("meshd.agent")


class PolicyMetrics:
    def __init__(self, folder: Path | None = None) -> None:
        self.path = folder / "policy-metrics.json" if folder else None
        self.counts: Counter[str] = Counter()
        if self.path and self.path.exists():
            try:
                self.counts.update(json.loads(self.path.read_text()))
            except (OSError, ValueError):
                log.warning("policy metrics in %s unreadable; starting from zero", self.path)

    def inc(self, name: str, detail: str = "") -> None:
        self.counts[name] += 1
        # The file first: whoever sees the log line finds the count on disk.
        if self.path is not None:
            atomic_write_json(self.path, dict(sorted(self.counts.items())), indent=1)
        log.info("policy metric %s=%d%s", name, self.counts[name], f" ({detail})" if detail else "")
