"""The per-agent stream cap's leases (app.web.stream_slots)."""

from __future__ import annotations

import gc

import pytest

from app.platform.errors import Problem
from app.web.stream_slots import StreamSlots


def test_a_lease_nobody_released_frees_its_slot_when_it_is_gone() -> None:
    """A response that was built but never sent drops its lease: the slot comes back."""
    slots = StreamSlots(1)
    lease = slots.acquire("a")
    with pytest.raises(Problem):
        slots.acquire("a")
    del lease
    gc.collect()
    assert slots.open_streams("a") == 0
    kept = slots.acquire("a")
    kept.release()
    kept.release()  # twice: still one slot freed
    assert slots.open_streams("a") == 0
