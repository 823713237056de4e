"""The Procfile: the process list ``make run`` runs and production deploys.

The format is Heroku's: ``name: command`` per line, anything else (comments,
blank lines) ignored; commands run with ``sh -c``, so ``${VAR:-default}``
works in them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

LINE = re.compile(r"^([A-Za-z0-9_-]+):\s*(.+)$")
RELEASE = "release"


@dataclass(frozen=True)
class Procfile:
    release: str                          # the migrations, run to completion first
    processes: list[tuple[str, str]]      # the rest, in file order: (name, command)

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.processes]


def parse(text: str, source: str = "Procfile") -> Procfile:
    entries: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        match = LINE.match(line)
        if not match:
            continue
        name, command = match.group(1), match.group(2).strip()
        if name in entries:
            raise ValueError(f"{source}:{number}: process `{name}` is defined twice")
        entries[name] = command
    if RELEASE not in entries:
        raise ValueError(f"{source} has no `{RELEASE}` process (migrations)")
    release = entries.pop(RELEASE)
    return Procfile(release, list(entries.items()))


def read(path: Path) -> Procfile:
    if not path.is_file():
        raise SystemExit(f"devstack: no Procfile at {path}")
    try:
        return parse(path.read_text(), str(path))
    except ValueError as exc:
        raise SystemExit(f"devstack: {exc}") from None
