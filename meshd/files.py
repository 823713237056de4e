"""Replacing a file so that a crash at any instant leaves the old or the new one, never a torn one."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def atomic_write_json(path: Path, data: Any, *, indent: int | None = None) -> None:
    """Write ``data`` as JSON to ``path``: temp file (mode 0600) in the same folder,
    fsync, rename over ``path``, fsync of the folder (so the rename itself survives)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            if indent is None:
                json.dump(data, f, separators=(",", ":"))
            else:
                json.dump(data, f, indent=indent)
                f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
