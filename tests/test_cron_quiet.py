"""Cron logs only when a job did something: arq's per-run
INFO lines are muted, a job that acted still logs."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from app.platform.settings import Settings
from cron import worker


async def test_cron_runs_are_not_logged_at_info(migrated: Settings,
                                                caplog: pytest.LogCaptureFixture) -> None:
    arq_log = logging.getLogger("arq.worker")
    before = arq_log.level
    ctx: dict[str, Any] = {"settings": migrated}
    try:
        await worker.startup(ctx)
        assert not arq_log.isEnabledFor(logging.INFO)
        caplog.set_level(logging.INFO)
        caplog.clear()
        await worker.gauges(ctx)  # a run that changes nothing
        assert not [r for r in caplog.records if r.name.startswith(("mesh.cron", "arq"))
                    and r.levelno >= logging.INFO]
    finally:
        await worker.shutdown(ctx)
        arq_log.setLevel(before)
