"""Content fingerprints for idempotency: same id + same content → the stored record."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def content_hash(**fields: Any) -> str:
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()
